"""The `klog` source's options: Spark's Kafka source names, parsed once on the driver.

Spark hands a data source its options lower-cased in a case-insensitive mapping (so camelCase
lookups on a plain dict would miss); everything here works on lower-case keys. Bad values raise
klog.errors.UsageError with one line naming the option.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from klog.errors import UsageError, log_warning

if TYPE_CHECKING:
    from klog.client.interface import AnyStore

EARLIEST = -2  # Spark's per-partition JSON: -2 means earliest, -1 latest
LATEST = -1

# What a position spec can be: "earliest", "latest", {topic: {partition: offset}}, or a timestamp
# (one for all partitions, or {topic: {partition: ms}}).
OffsetsSpec = str | dict[str, dict[int, int]]

READ_OPTIONS = {
    "topic", "subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets",
    "startingtimestamp", "endingtimestamp", "startingoffsetsbytimestamp", "endingoffsetsbytimestamp",
    "minpartitions", "failondataloss", "datadir", "maxoffsetspertrigger", "includeheaders", "path",
    "startingoffsetsbytimestampstrategy", "kafka.isolation.level",
}
# Options Spark's Kafka source or sink accepts that mean nothing for files on this machine: accepted
# with one warning (a query written for Kafka runs), not refused. Any other kafka.* option (a
# Kafka consumer or producer setting) is treated the same way.
SPARK_IGNORED_OPTIONS = {
    "minoffsetspertrigger", "maxtriggerdelay", "groupidprefix", "fetchoffset.numretries",
    "fetchoffset.retryintervalms", "kafkaconsumer.polltimeoutms",
}
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
_warned: set[str] = set()
# Spark's startingOffsetsByTimestampStrategy: what a starting time with no record at or after it
# means for a partition ("error", Spark's default, fails the query; "latest" starts at the end)
TIMESTAMP_STRATEGIES = ("error", "latest")
WRITE_OPTIONS = {"topic", "datadir", "compression", "checkpointlocation", "queryname", "path", "acks",
                 "includeheaders", "transactional.id", "transaction.timeout.ms", "batchid"}


@dataclass(frozen=True)
class ReadOptions:
    data_dir: str
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: dict[str, tuple[int, ...]] = field(default_factory=dict)
    starting: OffsetsSpec = "earliest"
    ending: OffsetsSpec = "latest"
    starting_ms: int | dict[str, dict[int, int]] | None = None
    ending_ms: int | dict[str, dict[int, int]] | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    starting_timestamp_strategy: str = "error"
    isolation_level: str = "read_uncommitted"  # kafka.isolation.level; Kafka's consumers' default
    include_headers: bool = True  # includeHeaders=false drops the headers column
    kafka: tuple[tuple[str, str], ...] = ()  # kafka.* options: with kafka.bootstrap.servers, a cluster


@dataclass(frozen=True)
class WriteOptions:
    data_dir: str
    topic: str | None = None
    compression: str = "none"
    acks: str = "all"
    checkpoint: str | None = None
    kafka: tuple[tuple[str, str], ...] = ()
    transactional_id: str | None = None  # each write (a batch write, a micro-batch) is one transaction
    transaction_timeout_ms: int | None = None
    batch_id: int | None = None  # batch writes in foreachBatch: the micro-batch, written once


def lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def kafka_options(opts: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """Spark's Kafka source passes `kafka.`-prefixed options to its client: so do we (the names are
    lower-cased like every option; Kafka's client property names are lower case)."""
    return tuple(sorted((k[len("kafka."):], v) for k, v in opts.items() if k.startswith("kafka.")))


# The cluster `klog spark --bootstrap-server` names, as kafka.* options (empty: the local store). Set
# once per command by the CLI; every source and sink the command creates carries it to the executors.
_cluster: tuple[tuple[str, str], ...] = ()


def use_cluster(kafka: dict[str, str] | None) -> None:
    """Make the commands' reads and writes go to this cluster (bootstrap.servers plus client properties)."""
    global _cluster
    _cluster = tuple(sorted((kafka or {}).items()))


def cluster_options() -> dict[str, str]:
    return {f"kafka.{k}": v for k, v in _cluster}


def location(data_dir: str) -> dict[str, str]:
    """The options naming where the command's topics are: the store, and the cluster if one was given."""
    return {"dataDir": data_dir, **cluster_options()}


def open_store(data_dir: str) -> AnyStore:
    """The driver's view of where the topics are (the cluster when one was given)."""
    if _cluster:
        from klog.client.remote.store import RemoteStore
        from klog.client.remote.target import ClusterTarget

        props = dict(_cluster)
        return RemoteStore(ClusterTarget(props.pop("bootstrap.servers"), props))
    from klog.client.store import Store

    return Store(data_dir, create=False)


def resolve_data_dir(value: str | None) -> str:
    """The dataDir option, else $KLOG_DATA_DIR, else the default; absolute, since executors get it as is."""
    from klog.store.layout import default_data_dir

    return os.path.abspath(os.path.expanduser(value or default_data_dir()))


def _check_names(opts: dict[str, str], known: set[str], what: str) -> None:
    for name in opts:
        if name in known:
            continue
        if name.startswith("kafka.") and "kafka.bootstrap.servers" in opts:
            continue  # a cluster: kafka.* options are its client's properties
        if name.startswith("kafka.") or name in SPARK_IGNORED_OPTIONS:
            _warn_once(name, f"option '{name}' has no effect on the klog {what} (it reads and writes this "
                             "machine's files, not a Kafka cluster); ignored")
            continue
        raise UsageError(f"unknown option '{name}' for the klog {what} (known: {', '.join(sorted(known))})")


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        log_warning(message)


def parse_read_options(options: Mapping[str, str], streaming: bool = False) -> ReadOptions:
    opts = lower(options)
    _check_names(opts, READ_OPTIONS, "source")
    subscribe = opts.get("subscribe") or opts.get("topic") or opts.get("path")
    chosen = [n for n, v in (("subscribe", subscribe), ("subscribePattern", opts.get("subscribepattern")),
                             ("assign", opts.get("assign"))) if v]
    if len(chosen) != 1:
        raise UsageError("the klog source needs exactly one of the options subscribe (or topic), subscribePattern "
                         f"and assign (got {', '.join(chosen) or 'none'})")
    topics = tuple(t.strip() for t in subscribe.split(",") if t.strip()) if subscribe else ()
    pattern = opts.get("subscribepattern") or None
    if pattern is not None:
        import re

        try:
            re.compile(pattern)
        except re.error as e:
            raise UsageError(f"invalid subscribePattern '{pattern}': {e}") from None
    assign = _parse_assign(opts["assign"]) if opts.get("assign") else {}
    default_start = "latest" if streaming else "earliest"
    starting = _parse_offsets(opts.get("startingoffsets", default_start), "startingOffsets")
    ending = _parse_offsets(opts.get("endingoffsets", "latest"), "endingOffsets")
    if starting == "latest" and not streaming and "startingoffsets" in opts:
        raise UsageError("startingOffsets=latest is not allowed in a batch read (it would read nothing)")
    if isinstance(starting, dict) and not streaming:
        latest = sorted(f"{t}-{p}" for t, parts in starting.items() for p, o in parts.items() if o == LATEST)
        if latest:  # Spark: "startingOffsets for ... can't be latest for batch queries on Kafka"
            raise UsageError(f"startingOffsets for {', '.join(latest)} can't be latest (-1) for batch reads")
    isolation = opts.get("kafka.isolation.level", "read_uncommitted").strip().lower()
    if isolation not in ISOLATION_LEVELS:
        raise UsageError(f"invalid kafka.isolation.level '{isolation}': use {' or '.join(ISOLATION_LEVELS)}")
    if ending == "earliest":
        raise UsageError("endingOffsets=earliest is not allowed (it would read nothing)")
    if streaming and "endingoffsets" in opts:
        raise UsageError("endingOffsets is for batch reads; a stream reads on as records arrive")
    return ReadOptions(
        data_dir=resolve_data_dir(opts.get("datadir")),
        subscribe=topics, pattern=pattern, assign=assign, starting=starting, ending=ending,
        starting_ms=_parse_time(opts, "startingtimestamp", "startingoffsetsbytimestamp"),
        ending_ms=_parse_time(opts, "endingtimestamp", "endingoffsetsbytimestamp"),
        min_partitions=_positive_int(opts, "minpartitions", "minPartitions"),
        fail_on_data_loss=_bool(opts, "failondataloss", "failOnDataLoss", True),
        max_offsets_per_trigger=_positive_int(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger"),
        starting_timestamp_strategy=_timestamp_strategy(opts),
        isolation_level=isolation,
        include_headers=_bool(opts, "includeheaders", "includeHeaders", True),
        kafka=kafka_options(opts),
    )


def _timestamp_strategy(opts: dict[str, str]) -> str:
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in TIMESTAMP_STRATEGIES:
        raise UsageError(f"invalid startingOffsetsByTimestampStrategy '{strategy}': use error or latest")
    return strategy


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    opts = lower(options)
    _check_names(opts, WRITE_OPTIONS, "sink")
    from klog.store import compression

    codec = opts.get("compression", "none")
    if codec not in compression.CODEC_IDS:
        raise UsageError(f"invalid compression '{codec}': use {', '.join(compression.CODEC_IDS)}")
    acks = opts.get("acks", "all")
    if acks not in ("0", "1", "all"):
        raise UsageError(f"invalid acks '{acks}': use 0, 1 or all")
    tid = opts.get("transactional.id") or None
    timeout = _positive_int(opts, "transaction.timeout.ms", "transaction.timeout.ms")
    if tid is not None:
        from klog.meta.transactions import validate_transactional_id

        validate_transactional_id(tid)
        if acks != "all":
            raise UsageError(f"option transactional.id needs acks=all (got acks={acks})")
    elif timeout is not None:
        raise UsageError("option transaction.timeout.ms needs transactional.id")
    batch_id = None
    if "batchid" in opts:
        try:
            batch_id = int(opts["batchid"])
        except ValueError:
            batch_id = -1
        if batch_id < 0:
            raise UsageError(f"invalid batchId '{opts['batchid']}': use the foreachBatch batch id (0 or more)")
    return WriteOptions(resolve_data_dir(opts.get("datadir")), opts.get("topic") or opts.get("path") or None,
                        codec, acks, opts.get("checkpointlocation") or None, kafka_options(opts), tid, timeout,
                        batch_id)


def _parse_assign(text: str) -> dict[str, tuple[int, ...]]:
    """assign: Spark's JSON {"topicA":[0,1],"topicB":[2]}."""
    try:
        raw = json.loads(text)
        if not isinstance(raw, dict) or not raw or not all(isinstance(ps, list) for ps in raw.values()):
            raise ValueError
        assign = {str(t): tuple(sorted({int(p) for p in ps})) for t, ps in raw.items()}
    except (ValueError, TypeError):
        raise UsageError(f"invalid assign '{text}': use JSON such as {{\"orders\":[0,1]}}") from None
    if any(p < 0 for ps in assign.values() for p in ps):
        raise UsageError(f"invalid assign '{text}': partitions are 0 or more")
    return assign


def _parse_offsets(text: str, name: str) -> OffsetsSpec:
    text = text.strip()
    if text in ("earliest", "latest"):
        return text
    try:
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise ValueError
        spec = {str(t): {int(p): int(o) for p, o in parts.items()} for t, parts in raw.items()}
    except (ValueError, TypeError, AttributeError):
        raise UsageError(f"invalid {name} '{text}': use earliest, latest or JSON such as "
                         "{\"orders\":{\"0\":23,\"1\":-2}} (-2 earliest, -1 latest)") from None
    for t, parts in spec.items():
        for p, o in parts.items():
            if o < EARLIEST or p < 0:
                raise UsageError(f"invalid {name}: {t} partition {p} offset {o}")
            if name == "endingOffsets" and o == EARLIEST:
                raise UsageError(f"invalid endingOffsets: -2 (earliest) for {t} partition {p}")
    return spec


def _parse_time(opts: dict[str, str], single: str, per_partition: str) -> int | dict[str, dict[int, int]] | None:
    # both given: the single time wins, as in Spark's Kafka source ("startingTimestamp takes precedence
    # over startingOffsetsByTimestamp and startingOffsets"); the per-partition JSON is still checked
    if single in opts and per_partition in opts:
        _parse_time({per_partition: opts[per_partition]}, single, per_partition)
    if single in opts:
        try:
            value = int(opts[single])
        except ValueError:
            raise UsageError(f"invalid {single} '{opts[single]}': use epoch milliseconds") from None
        if value < 0:
            raise UsageError(f"invalid {single} '{opts[single]}': use epoch milliseconds")
        return value
    if per_partition in opts:
        spec = _parse_offsets(opts[per_partition], per_partition)
        if not isinstance(spec, dict):
            raise UsageError(f"invalid {per_partition}: use JSON such as {{\"orders\":{{\"0\":1700000000000}}}}")
        return spec
    return None


def _positive_int(opts: dict[str, str], key: str, name: str) -> int | None:
    if key not in opts:
        return None
    try:
        value = int(opts[key])
    except ValueError:
        value = 0
    if value < 1:
        raise UsageError(f"invalid {name} '{opts[key]}': use a whole number of 1 or more")
    return value


def _bool(opts: dict[str, str], key: str, name: str, default: bool) -> bool:
    if key not in opts:
        return default
    value = opts[key].strip().lower()
    if value not in ("true", "false"):
        raise UsageError(f"invalid {name} '{opts[key]}': use true or false")
    return value == "true"
