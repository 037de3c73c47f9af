"""The N newest records of some topics (consume's --last) as a library call."""

from __future__ import annotations

import collections
from typing import Any

from klog.client.consumer import StartSpec
from klog.client.records import Record


def newest_records(store: Any, topics: list[str], n: int, *, count: int | None = None, follow: bool = False,
                   **options: Any) -> tuple[list[Record], Any]:
    """The `n` newest records of `topics` (all partitions, or `partitions=`), oldest first, cut to
    `count`; and with `follow` a consumer of whatever comes after the ends read (None otherwise, or
    when `count` is already reached). `options` go to `store.consumer` (record_filter, until_ms, ...).

    The n newest of every partition are read and merged in time order, then cut to the last n: the
    n newest of all are among them."""
    tails = store.consumer(*topics, start=StartSpec("tail", n), **options)
    newest = list(collections.deque(tails, maxlen=n)) if n else []
    if count is not None:
        newest = newest[:count]
    rest = None
    if follow and (count is None or len(newest) < count):
        rest = store.consumer(*topics, start="end", follow=True, count=None if count is None else count - len(newest),
                              **options)
        for (topic, p), offset in tails.positions().items():
            rest.seek(topic, p, offset)
    return newest, rest
