"""Planning on the driver: which topic-partitions to read and the offset range [start, end) of each.

Ranges never go below a partition's log start offset (unless failOnDataLoss asks to report that)
nor above its high watermark; `minPartitions` splits big ranges so every core gets work.
"""

from __future__ import annotations

from dataclasses import dataclass

from klog.broker.resolve import resolve_partitions, resolve_topic_names
from klog.client.consumer import StartKind, StartSpec
from klog.errors import OffsetOutOfRangeError, UnknownTopicError, UsageError
from klog.spark.options import EARLIEST, LATEST, OffsetsSpec, ReadOptions

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class OffsetRange:
    """One Spark input partition's work: offsets [start, end) of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


class _OffsetsOnce:
    """A cluster store as one planning pass sees it: each topic's offsets (earliest, latest, at a time)
    asked once, in one ListOffsets for all its partitions, instead of once per partition and bound, which
    made planning quadratic in the partition count (300 partitions: 44 s). Every partition is also planned
    against the same answer."""

    def __init__(self, store) -> None:  # noqa: ANN001 - RemoteStore
        self._store = store
        self._asked: dict[tuple, dict[int, int | None]] = {}

    def offsets(self, topic: str, timestamp: int | None = None, committed: bool = False) -> dict[int, int | None]:
        key = (topic, -1 if timestamp is None else timestamp, committed)
        if key not in self._asked:
            self._asked[key] = self._store.offsets(topic, timestamp, committed=committed)
        return self._asked[key]

    def partition(self, topic: str, partition: int):  # noqa: ANN201 - RemotePartitionView
        from dataclasses import replace

        return replace(self._store.partition(topic, partition), store=self)

    def __getattr__(self, name: str):  # noqa: ANN204 - the store's other methods as they are
        return getattr(self._store, name)


def planning_view(store):  # noqa: ANN001, ANN201 - AnyStore
    """The store for one planning pass (a local store as it is: its offsets are in memory)."""
    if isinstance(store, _OffsetsOnce) or not hasattr(store, "offsets") or hasattr(store, "data_dir"):
        return store
    return _OffsetsOnce(store)


def topic_partitions(store, opts: ReadOptions) -> list[TopicPartition]:
    """The partitions the options name: subscribe (all partitions), subscribePattern or assign."""
    if opts.assign:
        out = []
        for topic, parts in opts.assign.items():
            _require_topic(store, topic)
            try:
                out += [(topic, p) for p in resolve_partitions(store, topic, parts)]
            except UsageError as e:
                raise UsageError(f"assign: {e}") from None
        return out
    for topic in opts.subscribe:
        _require_topic(store, topic)
    # a pattern that matches nothing yet is an empty query, as in Spark's Kafka source
    topics = resolve_topic_names(store, opts.subscribe, opts.pattern, allow_none=True)
    if opts.pattern is not None:
        topics.sort()
    return [(t, p) for t in topics for p in resolve_partitions(store, t)]


def checked_partitions(store, opts: ReadOptions) -> list[TopicPartition]:
    """topic_partitions(), after checking that per-partition offsets or timestamps name only those
    (Spark's Kafka source refuses them too, rather than ignoring a typo)."""
    tps = topic_partitions(store, opts)
    read = set(tps)
    for name, spec in (("startingOffsets", opts.starting), ("endingOffsets", opts.ending),
                       ("startingOffsetsByTimestamp", opts.starting_ms),
                       ("endingOffsetsByTimestamp", opts.ending_ms)):
        if not isinstance(spec, dict):
            continue
        extra = sorted((t, p) for t, parts in spec.items() for p in parts if (t, p) not in read)
        if extra:
            raise UsageError(f"{name} names {_names(extra)}, which this query does not read "
                             f"(it reads {_names(tps) or 'no partitions'})")
        missing = [tp for tp in tps if tp[1] not in spec.get(tp[0], {})]
        if missing and name in ("startingOffsets", "endingOffsets"):
            # Spark's Kafka source: "If startingOffsets contains specific offsets, you must specify all
            # TopicPartitions. Use -1 for latest, -2 for earliest."
            raise UsageError(f"{name} must name every partition the query reads (-2 earliest, -1 latest); "
                             f"missing {_names(missing)}")
    return tps


def end_offset(part, opts: ReadOptions) -> int:
    """Where `latest` is: the high watermark, or with kafka.isolation.level=read_committed the
    last stable offset (as a Kafka consumer's end offsets)."""
    if opts.isolation_level != "read_committed":
        return part.high_watermark()
    if not hasattr(part, "leader"):
        # a cluster's partition: its last stable offset, as a read_committed consumer's ListOffsets. Not
        # the high watermark: a stream's micro-batch would end there while its read stops at the stable
        # offset, and the next batch would start past an open transaction's records, losing them
        return part.store.offsets(part.topic, -1, committed=True)[part.partition] or 0
    from klog.broker.offsets import last_stable_offset

    return last_stable_offset(part)


def _names(tps: list[TopicPartition], shown_max: int = 8) -> str:
    names = [f"{t}-{p}" for t, p in tps]
    more = len(names) - shown_max
    return ", ".join(names[:shown_max]) + (f" and {more} more" if more > 0 else "")


def _require_topic(store, topic: str) -> None:
    """Spark's wording for a topic that is not there (the store's own differs, local and remote)."""
    if not store.has_topic(topic):
        raise UnknownTopicError(f"topic '{topic}' does not exist")


def position(store, tp: TopicPartition, spec: OffsetsSpec, ms: int | dict | None, default: int,
             fail_on_data_loss: bool, what: str, no_match: str = "latest", opts: ReadOptions | None = None) -> int:
    """An offset from a spec: a timestamp (wins when given), earliest/latest, or per-partition JSON.
    `no_match`: a time with no record at or after it is the end ("latest") or an error ("error")."""
    part = store.partition(*tp)
    low = part.log_start_offset()
    high = part.high_watermark() if opts is None else end_offset(part, opts)
    start = _start_spec(tp, spec, ms, default)
    found = None
    if start.kind is StartKind.TIMESTAMP:
        found = part.offset_for_timestamp(start.value)
        if found is None and no_match == "error":
            raise OffsetOutOfRangeError(
                f"{tp[0]}-{tp[1]} has no record at or after {start.value} (the starting time); set "
                "startingOffsetsByTimestampStrategy=latest to start such partitions at their end")
    elif start.kind is StartKind.OFFSET and start.value < low and fail_on_data_loss:
        raise OffsetOutOfRangeError(f"{what} {start.value} of {tp[0]}-{tp[1]} is below its log start offset {low} "
                                    "(those records are gone; set failOnDataLoss=false to skip them)")
    return start.offset(low, high, found, f"{tp[0]}-{tp[1]}", what)


def _start_spec(tp: TopicPartition, spec: OffsetsSpec, ms: int | dict | None, default: int) -> StartSpec:
    """One partition's position as the consumers' StartSpec: a timestamp (wins when given), earliest
    or latest, or its entry of the per-partition JSON (-2 earliest, -1 latest, `default` when absent)."""
    when = ms if isinstance(ms, int) or ms is None else ms.get(tp[0], {}).get(tp[1])
    if when is not None:
        return StartSpec(StartKind.TIMESTAMP, when)
    if isinstance(spec, dict):
        value = spec.get(tp[0], {}).get(tp[1], default)
        spec = "earliest" if value == EARLIEST else "latest" if value == LATEST else value
    if spec == "earliest":
        return StartSpec(StartKind.BEGINNING)
    if spec == "latest":
        return StartSpec(StartKind.END)
    assert isinstance(spec, int), spec
    return StartSpec(StartKind.OFFSET, spec)


def plan(store, opts: ReadOptions) -> list[OffsetRange]:
    """Batch read: one range per topic-partition, from startingOffsets to endingOffsets."""
    store = planning_view(store)
    ranges = []
    for tp in checked_partitions(store, opts):
        start = position(store, tp, opts.starting, opts.starting_ms, EARLIEST, opts.fail_on_data_loss,
                         "startingOffsets", opts.starting_timestamp_strategy, opts)
        end = position(store, tp, opts.ending, opts.ending_ms, LATEST, opts.fail_on_data_loss, "endingOffsets",
                       opts=opts)
        ranges.append(OffsetRange(tp[0], tp[1], start, max(start, end)))
    return ranges


def split(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """With minPartitions above the range count, cut ranges in proportion to their size (Spark's Kafka rule,
    rounded up so there are at least minPartitions, as the option's name promises)."""
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or min_partitions <= len(ranges):
        return ranges
    total = sum(r.size for r in ranges)
    out = []
    for r in ranges:
        parts = max(1, min(r.size, -(-min_partitions * r.size // total)))
        step, extra = divmod(r.size, parts)
        start = r.start
        for i in range(parts):
            end = start + step + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
        assert start == r.end, (r, parts)
    return out


def stream_offsets(ranges_or_positions: dict[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Spark's offset JSON shape: {topic: {"partition": offset}} (keys are strings in JSON)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, p), offset in sorted(ranges_or_positions.items()):
        out.setdefault(topic, {})[str(p)] = offset
    return out


def from_stream_offsets(offsets: dict) -> dict[TopicPartition, int]:
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() for p, o in parts.items()}
