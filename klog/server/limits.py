"""What one client may cost everyone else: entries per request, connections per address and in all.

Kafka has no bound on the entries of a request (its parsing runs on many threads); here requests are
parsed by kio's native reader holding the interpreter for the whole frame (0.6 s for a Produce of
1,000,000 partition entries), so a request's entries are counted first, by a walk over its schema
(klog.protocol.walk) that stops as soon as the count passes the limit, and a request over it is
refused before it is parsed: INVALID_REQUEST, one log line, the connection keeps serving.
"""

from __future__ import annotations

import dataclasses
import time
import typing
from dataclasses import dataclass, field
from typing import Any

from klog.errors import UsageError
from klog.protocol.walk import is_optional

MAX_REQUEST_ENTRIES_DEFAULT = 20_000  # array entries in one request, all arrays summed
UNBOUNDED = 2**31 - 1  # Kafka's default for max.connections and max.connections.per.ip
# descriptors kept for the store (segments, indexes, locks, LMDB) when max.connections follows the
# process's open-file limit: a quarter of it, at least this many
STORE_FDS_MIN = 64
REFUSAL_LOG_INTERVAL_S = 10.0  # one log line per this, with the count refused since the last one
# What one client may hold of each of the server's pools (group member data, members, groups,
# transactional ids, offset growth; docs/serve-limits.md): a quarter, so one client filling its share
# leaves room for three others. A client is a share key (RequestContext.share_key): a principal, or an
# unauthenticated client's address.
CLIENT_SHARE_DEFAULT = 0.25
# The share key of a client that did not authenticate: User:ANONYMOUS and its address
ADDRESS_KEY_PREFIX = "User:ANONYMOUS at "


@dataclass
class ServeLimits:
    """`klog serve`'s bounds on connections and requests (docs/serve-limits.md)."""

    max_connections: int | None = None  # None: what the open-file limit leaves (default_max_connections)
    max_connections_per_ip: int = UNBOUNDED
    per_ip_overrides: dict[str, int] = field(default_factory=dict)  # max.connections.per.ip.overrides
    max_request_entries: int = MAX_REQUEST_ENTRIES_DEFAULT
    client_share: float = CLIENT_SHARE_DEFAULT

    def validate(self) -> None:
        if self.max_connections is None:
            self.max_connections = default_max_connections()
        for name, value in (("--max-connections", self.max_connections),
                            ("--max-connections-per-ip", self.max_connections_per_ip),
                            ("--max-request-entries", self.max_request_entries)):
            if value < 1:
                raise UsageError(f"{name} must be 1 or more")
        if not 0 < self.client_share <= 1:  # (NaN fails too)
            raise UsageError(f"--client-share must be above 0 and at most 1 (the fraction of each pool one client "
                             f"may hold; default {CLIENT_SHARE_DEFAULT}), not {self.client_share:g}")
        for host, value in self.per_ip_overrides.items():
            if value < 0:
                raise UsageError(f"--max-connections-per-ip-overrides: {host}:{value} must be 0 or more")

    def per_ip(self, host: str) -> int:
        return self.per_ip_overrides.get(host, self.max_connections_per_ip)


def default_max_connections() -> int:
    """Kafka's max.connections is unbounded, but past the process's open-file limit accepting fails
    (EMFILE) and the store cannot open its files: the limit less what the store keeps."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= UNBOUNDED:
        return UNBOUNDED
    return max(1, soft - max(STORE_FDS_MIN, soft // 4))


def parse_share(text: str) -> float:
    """--client-share's value: a fraction (0.25), checked by ServeLimits.validate."""
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"--client-share: {text!r} is not a number (a fraction above 0 and at most 1, e.g. "
                         f"{CLIENT_SHARE_DEFAULT})") from None


def share_of(pool: int, share: float) -> int:
    """One client's bound: `share` of `pool`, at least 1."""
    return max(1, int(pool * share))


def is_address_key(key: str) -> bool:
    """Whether a share key is an unauthenticated client's address (RequestContext.share_key)."""
    return key.startswith(ADDRESS_KEY_PREFIX)


def some_listener_authenticates(listeners: Any, ssl_client_auth: str) -> bool:
    """A SASL listener, or a TLS one asking for client certificates: some clients are principals."""
    return any(lst.sasl or (lst.tls and ssl_client_auth != "none") for lst in listeners)


class AddressShares:
    """What every unauthenticated client (share key: its address) holds of each pool, together; where
    some listener authenticates, bounded at the pool less one share, so that authenticated principals
    keep at least one share's room: four addresses at the default quarter could fill a pool and have
    every principal's JoinGroup, InitProducerId and OffsetCommit refused. Where no listener
    authenticates every client is an address and nobody is to be kept room for: the pool alone bounds
    them (`bounded` False). One instance for every pool of the server. Each pool's entry changes from
    one thread at a time (the state machine's and the transactional ids' on the event loop, offset
    growth under OffsetGrowth's lock in the thread pool), so no lock of its own."""

    def __init__(self, bounded: bool = False) -> None:
        self.bounded = bounded
        self.held: dict[str, float] = {}  # pool -> what every address key holds of it (absent: nothing)

    def add(self, pool: str, key: str, amount: float) -> None:
        """`key`'s holding of `pool` changed by `amount` (nothing to count unless it is an address)."""
        if amount and key.startswith(ADDRESS_KEY_PREFIX):
            held = self.held.get(pool, 0) + amount
            if held > 1e-6:  # (offset growth is given back in fractions)
                self.held[pool] = held
            else:
                self.held.pop(pool, None)

    def refusal(self, pool: str, key: str, grows: float, pool_max: int, share_max: int,
                released: float = 0) -> str | None:
        """Why `key` may not take `grows` more of `pool` (`pool_max` in all, `share_max` a key), of which
        `released` is given back by other address keys in the same change (a member joining again from
        another address); None if it may."""
        if not self.bounded or not is_address_key(key):
            return None
        # (at least one share: with --client-share 1 nobody can be kept room for, and addresses keep a share)
        together, bound = grows - released, max(pool_max - share_max, share_max)
        held = self.held.get(pool, 0)
        if together > 0 and held + together > bound:
            return f"every unauthenticated client together holds {held:.0f} {pool}, at most {bound} (the rest " \
                   f"is kept for authenticated clients)"
        return None


def parse_overrides(text: str) -> dict[str, int]:
    """Kafka's max.connections.per.ip.overrides: 'host:count,host:count' ('[::1]:5' for IPv6)."""
    out: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.isdigit():
            raise UsageError(f"--max-connections-per-ip-overrides: '{item}' is not HOST:COUNT")
        out[host.strip("[]")] = int(count)
    return out


class RateLimitedLog:
    """One log line per interval for a repeated event, counting what it did not log."""

    def __init__(self, log: Any, interval_s: float = REFUSAL_LOG_INTERVAL_S) -> None:
        self._log = log
        self._interval_s = interval_s
        self._last = float("-inf")
        self._suppressed = 0

    def warning(self, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._last < self._interval_s:
            self._suppressed += 1
            return
        suffix = f" ({self._suppressed} more since the last such line)" if self._suppressed else ""
        self._log.warning(message + suffix, *args)
        self._last, self._suppressed = now, 0


# -- an answer for a request that is not parsed -------------------------------------------------------
def error_response(api_key: int, version: int, error: Any, message: str) -> Any:
    """The response of (api_key, version) saying `error` wherever it has an error code, its arrays
    empty: for a request refused before parsing (its entries are not known)."""
    from klog.protocol.kafka import response_module

    mod = response_module(api_key, version)
    cls = next(getattr(mod, n) for n in dir(mod) if n.endswith("Response")
               and getattr(getattr(mod, n), "__api_key__", None) == api_key and dataclasses.is_dataclass(
                   getattr(mod, n)) and getattr(mod, n).__name__.endswith("Response")
               and _is_top(getattr(mod, n)))
    from kio.schema.errors import ErrorCode

    return _filled(cls, ErrorCode(int(error)), message)


def _is_top(cls: type) -> bool:
    from kio.static.constants import EntityType

    return getattr(cls, "__type__", None) == EntityType.response


def _filled(cls: type, error: Any, message: str) -> Any:
    import datetime
    import uuid

    from kio.static.primitive import i32Timedelta, i64Timedelta

    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            if f.name == "error_code":
                values[f.name] = error
            continue
        hint, kafka_type = hints[f.name], f.metadata.get("kafka_type")
        optional = is_optional(hint)
        if f.name == "error_code":
            values[f.name] = error
        elif f.name == "error_message":
            values[f.name] = message
        elif typing.get_origin(hint) is tuple:
            values[f.name] = ()
        elif optional:
            values[f.name] = None
        elif dataclasses.is_dataclass(hint):
            values[f.name] = _filled(hint, error, message)
        elif kafka_type == "timedelta_i32":
            values[f.name] = i32Timedelta.parse(datetime.timedelta(0))
        elif kafka_type == "timedelta_i64":
            values[f.name] = i64Timedelta.parse(datetime.timedelta(0))
        elif kafka_type == "datetime_i64":  # -1, as Kafka's error answers (a delegation token's timestamps)
            values[f.name] = datetime.datetime.fromtimestamp(0, tz=datetime.UTC) - datetime.timedelta(milliseconds=1)
        elif kafka_type == "uuid":
            values[f.name] = uuid.UUID(int=0)
        elif kafka_type == "string":
            values[f.name] = ""
        elif kafka_type in ("bytes", "records"):
            values[f.name] = b""
        elif kafka_type == "bool":
            values[f.name] = False
        elif kafka_type == "float64":
            values[f.name] = 0.0
        else:
            values[f.name] = -1
    return cls(**values)
