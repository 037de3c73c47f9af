"""The errors of the Connect runtime, named as Kafka Connect names them."""

from __future__ import annotations

from klog.errors import KlogError, UsageError


class ConfigError(UsageError):
    """A connector config refused: the message names the failing field (Kafka's ConfigException)."""

    def __init__(self, name: str, value: object, reason: str) -> None:
        shown = "[hidden]" if "password" in name else value
        super().__init__(f"invalid value {shown!r} for configuration {name}: {reason}" if value is not None
                         else f"missing required configuration {name}: {reason}")
        self.field = name
        self.reason = reason


class ConnectError(KlogError):
    """A task or connector failed (Kafka's ConnectException)."""


class DataError(ConnectError):
    """A record a converter or transform cannot handle (Kafka's DataException)."""


class RetriableError(ConnectError):
    """A failure worth retrying (a database that went away): Kafka's RetriableException."""
