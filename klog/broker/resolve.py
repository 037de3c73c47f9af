"""Which topics and partitions a request names: the named ones checked to exist, a pattern's
matches, every partition when none is named. Over any store, local or remote (duck-typed: it asks
`topic`, `topic_names` and `partition_count`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from klog.errors import UnknownTopicError, UsageError

if TYPE_CHECKING:
    from klog.broker.store_protocol import TopicLookup


def resolve_topic_names(store: TopicLookup, topics: Iterable[str] = (), pattern: str | None = None,
                        exclude: Iterable[str] = (), allow_none: bool = False) -> list[str]:
    """The named topics (each must exist) plus every other topic of `store` (local or remote) whose
    whole name matches `pattern`, except those in `exclude`; an error when that leaves none (unless
    `allow_none`: a query whose pattern matches no topic yet)."""
    import re

    names = list(topics)
    for n in names:
        store.topic(n)
    if pattern:
        try:
            rx = re.compile(pattern)
        except re.error as e:
            raise UsageError(f"invalid --pattern '{pattern}': {e}") from None
        skip = set(exclude)
        names += [t for t in store.topic_names() if rx.fullmatch(t) and t not in names and t not in skip]
    if not names and not allow_none:
        raise UnknownTopicError(f"no topic matches pattern '{pattern}'" if pattern else "no topic given")
    return names


def resolve_partitions(store: TopicLookup, topic: str, wanted: Iterable[int] | None = None) -> list[int]:
    """The partitions of `topic` asked for (all of them when None), each checked to exist."""
    count = store.partition_count(topic)
    parts = list(range(count)) if wanted is None else list(wanted)
    for p in parts:
        if not 0 <= p < count:
            raise UsageError(f"topic '{topic}' has no partition {p} (it has {count})")
    return parts
