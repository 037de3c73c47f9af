"""The N newest records of some topics (consume's --last) as a library call."""

from __future__ import annotations

import collections
import heapq
from typing import Any

from klog.client.records import Record

FIRST_WINDOW = 4096  # records read back from a partition's end for a filtered --last; doubled each step

Where = tuple[str, int]  # (topic, partition)


def newest_records(store: Any, topics: list[str], n: int, *, count: int | None = None, follow: bool = False,
                   **options: Any) -> tuple[list[Record], Any]:
    """The `n` newest records of `topics` (all partitions, or `partitions=`), oldest first, cut to
    `count`; and with `follow` a consumer of whatever comes after the ends read (None otherwise, or
    when `count` is already reached). `options` go to `store.consumer` (record_filter, until_ms, ...).

    The n newest of every partition are read and merged in time order, then cut to the last n: the
    n newest of all are among them. Each partition is read backwards from its end in growing windows
    until it has n records or its log start is reached (transaction markers, aborted records under
    read_committed and compaction's gaps take offsets but are no records), keeping at most n of each
    in memory; with a `record_filter` they are the n newest *matches* (`grep | tail -n`); with
    `until_ms`, the n newest before each partition's first record at or after it (where
    `consume --until` stops). The same on a local store and on a cluster."""
    newest, ends = _newest_matches(store, topics, n, options)
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
                    ) -> tuple[list[Record], dict[Where, int]]:
    """The n newest records that pass the filter, and each partition's end where they were looked for."""
    # one reader for every partition, bounded to one range of each per pass (through a cluster a
    # pass is one Fetch per leader broker, or librdkafka's fetches of every partition assigned)
    until_ms = options.get("until_ms")
    reader = store.consumer(*topics, **{**options, "until_ms": None}, start="end", merge=False)
    try:
        spans = reader.spans()
        lows = {where: low for where, (low, _) in spans.items()}
        ends = {where: end for where, (_, end) in spans.items()}
        found: dict[Where, list[Record]] = {where: [] for where in spans}
        stops = dict(ends)
        if until_ms is not None and n:
            stops = _older_below(store, topics, ends, until_ms)
            found = _before_until(reader, stops, ends, n, until_ms)
        window = FIRST_WINDOW if options.get("record_filter") is not None else n
        _read_back(reader, lows, stops, found, n, window)
    finally:
        reader.close()
    merged = heapq.merge(*found.values(), key=lambda r: r.timestamp)
    return list(collections.deque(merged, maxlen=n)), ends


def _older_below(store: Any, topics: list[str], ends: dict[Where, int], until_ms: int) -> dict[Where, int]:
    """Per partition, an offset below which every record is older than --until: the time index's first
    offset at or after it (one lookup a topic); the end where nothing is that new."""
    out = dict(ends)
    for topic in topics:
        for p, at in store.offsets(topic, until_ms).items():
            if at is not None and (topic, p) in out:
                out[(topic, p)] = min(out[(topic, p)], at)
    return out


def _before_until(reader: Any, starts: dict[Where, int], ends: dict[Where, int], n: int, until_ms: int
                  ) -> dict[Where, list[Record]]:
    """The last n records from `starts` on that come before each partition's first record at or after
    --until (as `consume --until` stops): the time index's offset may be a transaction marker's or an
    aborted record's, with older records after it. Usually one read: that offset is the record."""
    ranges = {where: (starts[where], ends[where]) for where in ends if starts[where] < ends[where]}
    reader.until_ms = until_ms  # every reader stops each partition there
    try:
        got = _read_ranges(reader, ranges, {where: n for where in ranges})
    finally:
        reader.until_ms = None
    return {where: list(got.get(where, ())) for where in ends}


def _read_back(reader: Any, lows: dict[Where, int], stops: dict[Where, int], found: dict[Where, list[Record]],
               n: int, window: int) -> None:
    """Complete each partition's n newest records in `found` (oldest first) from below its stop:
    windows of offsets going back, doubled each pass, until it has n or its log start is reached."""
    stops = dict(stops)
    window = max(window, 1)
    while n and (pending := [w for w in found if len(found[w]) < n and stops[w] > lows[w]]):
        ranges = {w: (max(lows[w], stops[w] - window), stops[w]) for w in pending}
        got = _read_ranges(reader, ranges, {w: n - len(found[w]) for w in pending})
        for w in pending:
            found[w] = [*got[w], *found[w]]
            stops[w] = ranges[w][0]
        window *= 2


def _read_ranges(reader: Any, ranges: dict[Where, tuple[int, int]], keep: dict[Where, int]
                 ) -> dict[Where, collections.deque[Record]]:
    """The last `keep` records of each partition's offsets start..stop-1, in one pass of the reader."""
    reader.read_ranges(ranges)
    got = {w: collections.deque(maxlen=keep[w]) for w in ranges}
    for record in reader:
        got[(record.topic, record.partition)].append(record)
    return got
