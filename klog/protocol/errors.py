"""Kafka's error codes by name. kio's ErrorCode is the one table: the server answers with its
members (`E` in klog.protocol.kafka), the cluster client names a code it got back with error_name."""

from __future__ import annotations

from klog.protocol.loading import load_kio


def error_name(code: int) -> str:
    """Kafka's name of an error code (GROUP_ID_NOT_FOUND), for one error line."""
    load_kio()
    from kio.schema.errors import ErrorCode

    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error code {code}"
