"""Topic configs: Kafka's names and defaults, one table with a validator and a reason each.

Values are kept as strings in metadata (as Kafka does) and parsed here into a LogConfig.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from klog.errors import InvalidConfigError
from klog.store.limits import MAX_MESSAGE_BYTES_DEFAULT
from klog.store.plain import FrozenPlain

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
CODECS = ("producer", "none", "gzip", "snappy", "lz4", "zstd")


class ConfigKey(FrozenPlain):
    _fields = ("name", "default", "parse", "doc")
    name: str
    default: str
    parse: Callable[[str], object]
    doc: str

    def __init__(self, name: str, default: str, parse: Callable[[str], object], doc: str) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "default", default)
        object.__setattr__(self, "parse", parse)
        object.__setattr__(self, "doc", doc)


def _long(minimum: int, maximum: int = LONG_MAX) -> Callable[[str], int]:
    """Kafka's LONG type (or INT with maximum=INT_MAX). `maximum` is checked where a value is
    set (validate_configs, as Kafka's ConfigDef refuses it), not where a stored one is read: a
    store that took a larger value before still opens."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # (int's own text names Python, not the setting)
            raise ValueError(f"must be an integer, at least {minimum}") from None
        if value < minimum:
            raise ValueError(f"must be at least {minimum}")
        return value
    parse.maximum = maximum  # type: ignore[attr-defined]
    return parse


def _int(minimum: int) -> Callable[[str], int]:
    return _long(minimum, INT_MAX)


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("must be a number between 0 and 1") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be between 0 and 1")
    return value


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return text
    return parse


def _policy(text: str) -> str:
    parts = sorted(p.strip() for p in text.split(","))
    if not parts or any(p not in ("delete", "compact") for p in parts) or len(set(parts)) != len(parts):
        raise ValueError("must be delete, compact or compact,delete")
    return ",".join(parts)


def _bool(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError("must be true or false")
    return text.lower() == "true"


CONFIG_KEYS: dict[str, ConfigKey] = {k.name: k for k in (
    ConfigKey("retention.ms", "604800000", _long(-1), "keep segments this long (-1: forever)"),
    ConfigKey("retention.bytes", "-1", _long(-1), "keep at most this many bytes per partition (-1: no limit)"),
    ConfigKey("segment.bytes", "1073741824", _int(14), "roll a segment at this size"),
    ConfigKey("segment.ms", "604800000", _long(1), "roll a segment after this time span"),
    ConfigKey("segment.index.bytes", "10485760", _int(4),
              "index size limit per segment: a segment whose offset or time index is full rolls"),
    ConfigKey("index.interval.bytes", "4096", _int(0), "bytes between offset-index entries"),
    ConfigKey("cleanup.policy", "delete", _policy, "delete, compact, or compact,delete"),
    ConfigKey("min.insync.replicas", "1", _int(1), "in-sync replicas an acks=all write needs"),
    ConfigKey("max.message.bytes", str(MAX_MESSAGE_BYTES_DEFAULT), _int(0), "largest record batch accepted"),
    ConfigKey("message.timestamp.type", "CreateTime", _choice("CreateTime", "LogAppendTime"),
              "CreateTime keeps the producer's time; LogAppendTime stamps the append time"),
    ConfigKey("message.timestamp.before.max.ms", str(LONG_MAX), _long(0),
              "refuse CreateTime records older than this (KIP-937)"),
    ConfigKey("message.timestamp.after.max.ms", str(LONG_MAX), _long(0),
              "refuse CreateTime records this far in the future (KIP-937)"),
    ConfigKey("compression.type", "producer", _choice(*CODECS), "codec for stored batches"),
    # klog writes with fsync after every append by default (Kafka's default is never; a broker
    # has replicas on other machines, klog's replicas may share a power supply).
    ConfigKey("flush.messages", "1", _long(1), "fsync after this many appended batches"),
    ConfigKey("flush.ms", str(LONG_MAX), _long(0), "fsync when this long passed since the last fsync"),
    ConfigKey("delete.retention.ms", "86400000", _long(0), "how long tombstones survive compaction"),
    ConfigKey("min.cleanable.dirty.ratio", "0.5", _ratio, "dirty share that makes a log cleanable"),
    ConfigKey("min.compaction.lag.ms", "0", _long(0), "records younger than this are not compacted"),
    ConfigKey("max.compaction.lag.ms", str(LONG_MAX), _long(1), "force compaction after this long"),
    ConfigKey("unclean.leader.election.enable", "false", _bool,
              "let an out-of-sync replica become leader (may lose records)"),
    ConfigKey("file.delete.delay.ms", "60000", _long(0),
              "how long a segment retention removed stays as .deleted files before they are unlinked"),
)}


def validate_configs(configs: Mapping[str, str]) -> dict[str, str]:
    """Check names and values; returns the normalised string values."""
    out: dict[str, str] = {}
    for name, text in configs.items():
        key = CONFIG_KEYS.get(name)
        if key is None:
            raise InvalidConfigError(f"unknown topic config '{name}'")
        try:
            value = key.parse(str(text))
            maximum = getattr(key.parse, "maximum", None)
            if maximum is not None and value > maximum:
                raise ValueError(f"must be at most {maximum}")
        except ValueError as e:
            raise InvalidConfigError(f"invalid value '{text}' for {name}: {e}") from None
        out[name] = str(value).lower() if isinstance(value, bool) else (
            value if isinstance(value, str) else str(text).strip())
    return out


class LogConfig(FrozenPlain):
    """A topic's configs parsed once: one typed field per key of CONFIG_KEYS (the defaults are
    CONFIG_KEYS' defaults; a test keeps the two tables in step). Made with keyword arguments."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10485760
    max_message_bytes: int = MAX_MESSAGE_BYTES_DEFAULT
    flush_messages: int = 1
    flush_ms: int = LONG_MAX
    retention_ms: int = 604800000
    retention_bytes: int = -1
    timestamp_type: str = "CreateTime"
    timestamp_before_max_ms: int = LONG_MAX
    timestamp_after_max_ms: int = LONG_MAX
    compression_type: str = "producer"
    cleanup_policy: str = "delete"
    min_insync_replicas: int = 1
    file_delete_delay_ms: int = 60000
    delete_retention_ms: int = 86400000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    unclean_leader_election_enable: bool = False
    _fields = tuple(__annotations__)  # the fields above, in order

    def __init__(self, **values: object) -> None:
        for name in self._fields:
            object.__setattr__(self, name, values.pop(name) if name in values else getattr(LogConfig, name))
        if values:
            raise TypeError(f"LogConfig has no field {sorted(values)[0]!r}")

    @classmethod
    def from_configs(cls, configs: Mapping[str, str], *, lenient: bool = False) -> LogConfig:
        """Parse a topic's stored (already validated) configs; a missing key takes Kafka's default.
        `lenient`: a value klog does not parse (a broker's, e.g. compression.type=uncompressed)
        takes the default too instead of raising ValueError."""
        parsed = {}
        for field_name, name in _LOG_CONFIG_KEYS.items():
            key = CONFIG_KEYS[name]
            try:
                parsed[field_name] = key.parse(configs.get(name, key.default))
            except ValueError:
                if not lenient:
                    raise
                parsed[field_name] = key.parse(key.default)
        return cls(**parsed)  # type: ignore[arg-type]

    @property
    def compacted(self) -> bool:
        """cleanup.policy is compact or compact,delete."""
        return "compact" in self.cleanup_policy

    @property
    def deletes(self) -> bool:
        """cleanup.policy is delete or compact,delete: time and size retention apply."""
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        """message.timestamp.type=LogAppendTime: appends stamp the broker's time."""
        return self.timestamp_type == "LogAppendTime"


# LogConfig's fields and the topic config each is parsed from (every key of CONFIG_KEYS)
_LOG_CONFIG_KEYS = {
    "segment_bytes": "segment.bytes",
    "segment_ms": "segment.ms",
    "index_interval_bytes": "index.interval.bytes",
    "segment_index_bytes": "segment.index.bytes",
    "max_message_bytes": "max.message.bytes",
    "flush_messages": "flush.messages",
    "flush_ms": "flush.ms",
    "retention_ms": "retention.ms",
    "retention_bytes": "retention.bytes",
    "timestamp_type": "message.timestamp.type",
    "timestamp_before_max_ms": "message.timestamp.before.max.ms",
    "timestamp_after_max_ms": "message.timestamp.after.max.ms",
    "compression_type": "compression.type",
    "cleanup_policy": "cleanup.policy",
    "min_insync_replicas": "min.insync.replicas",
    "file_delete_delay_ms": "file.delete.delay.ms",
    "delete_retention_ms": "delete.retention.ms",
    "min_cleanable_dirty_ratio": "min.cleanable.dirty.ratio",
    "min_compaction_lag_ms": "min.compaction.lag.ms",
    "max_compaction_lag_ms": "max.compaction.lag.ms",
    "unclean_leader_election_enable": "unclean.leader.election.enable",
}
