"""The N newest records of some topics (consume's --last) as a library call."""

from __future__ import annotations

import collections
import heapq
from typing import Any

from klog.client.consumer import StartKind, StartSpec
from klog.client.records import Record

FIRST_WINDOW = 4096  # records read back from a partition's end for a filtered --last; doubled each step


def newest_records(store: Any, topics: list[str], n: int, *, count: int | None = None, follow: bool = False,
                   **options: Any) -> tuple[list[Record], Any]:
    """The `n` newest records of `topics` (all partitions, or `partitions=`), oldest first, cut to
    `count`; and with `follow` a consumer of whatever comes after the ends read (None otherwise, or
    when `count` is already reached). `options` go to `store.consumer` (record_filter, until_ms, ...).

    The n newest of every partition are read and merged in time order, then cut to the last n: the
    n newest of all are among them. Each partition of a local store is read backwards from its end in
    growing windows until it has n records (transaction markers, aborted records under read_committed
    and compaction's gaps take offsets but are no records), keeping at most n of each in memory; with a
    `record_filter` they are the n newest *matches* (`grep | tail -n`)."""
    if n and (options.get("record_filter") is not None or getattr(store, "is_local", True)):
        newest, ends = _newest_matches(store, topics, n, options)
    else:  # a cluster, unfiltered: the last n offsets of each partition
        tails = store.consumer(*topics, start=StartSpec(StartKind.TAIL, n), **options)
        newest = list(collections.deque(tails, maxlen=n)) if n else []
        ends = tails.positions()
    if count is not None:
        newest = newest[:count]
    rest = None
    if follow and (count is None or len(newest) < count):
        rest = store.consumer(*topics, start="end", follow=True, count=None if count is None else count - len(newest),
                              **options)
        for (topic, p), offset in ends.items():
            rest.seek(topic, p, offset)
    return newest, rest


def _newest_matches(store: Any, topics: list[str], n: int, options: dict[str, Any]
                    ) -> tuple[list[Record], dict[tuple[str, int], int]]:
    """The n newest records that pass the filter, and each partition's end where they were looked for."""
    if not getattr(store, "is_local", True):  # a cluster's consumer reads forward only: keep the last n seen
        reader = store.consumer(*topics, **options)
        return list(collections.deque(reader, maxlen=n)), reader.positions()
    from klog.broker.resolve import resolve_partitions

    per_partition, ends = [], {}
    for topic in topics:
        for p in resolve_partitions(store, topic, options.get("partitions")):
            found, ends[(topic, p)] = _partition_matches(store, topic, p, n, options)
            per_partition.append(found)
    merged = heapq.merge(*per_partition, key=lambda r: r.timestamp)
    return list(collections.deque(merged, maxlen=n)), ends


def _partition_matches(store: Any, topic: str, p: int, n: int, options: dict[str, Any]) -> tuple[list[Record], int]:
    """One partition's n newest matches (oldest first), read in windows going back from its end."""
    until_ms = options.get("until_ms")
    reader = store.consumer(topic, **{**options, "partitions": [p], "until_ms": None})
    [cursor] = reader.cursors
    part = store.partition(topic, p)
    end = cursor.end()
    if until_ms is not None:  # --until: the partition ends at its first record at or after it
        at = part.offset_for_timestamp(until_ms)
        end = end if at is None else min(end, at)
    # unfiltered, n offsets back usually hold the n records: start there
    low, stop = part.log_start_offset(), end
    window = FIRST_WINDOW if options.get("record_filter") is not None else max(n, 1)
    found: list[Record] = []
    while stop > low and len(found) < n:
        start = max(low, stop - window)
        cursor.offset, cursor.stop, cursor.done = start, stop, False
        found = [*collections.deque(reader, maxlen=n - len(found)), *found]
        stop, window = start, window * 2
    return found, end
