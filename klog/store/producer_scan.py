"""The one walk over a partition log's batch headers that producer state is learnt from: the
segments not yet past producer.id.expiration.ms, oldest first, header reads only.

Two readers fold it, each keeping what it needs of the same producers: the broker's producer
states (klog.broker.batches.ProducerStates, rebuilt on a partition's first idempotent write: each
producer's epoch and last sequences) and the cleaner's active producers (klog.store.cleaner
.active_producers: each producer's last data batch, which compaction keeps even when emptied).
Reading the same segments, they know the same producers: a producer the broker still checks
sequences of keeps its last batch through compaction, so its sequences survive a restart.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from klog.store.codec import BatchHeader
    from klog.store.log import PartitionLog

PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms default


def recent_bases(log: PartitionLog, since_ms: int | None = None) -> list[int]:
    """The base offsets of `log`'s segments, oldest first; with `since_ms`, only those a producer
    idle since then may have written in: counting back from the newest segment, the first whose
    newest time-index entry is older than `since_ms` is the last one taken (older segments are
    older still). The newest segment is always taken. Refreshes the segment list first."""
    log.refresh_segments()
    bases = list(log.bases)
    if since_ms is None:
        return bases
    keep = []
    for base in reversed(bases):
        keep.append(base)
        segment = log.segments.get(base)
        if segment is None:
            continue  # (removed meanwhile: recent_headers passes over it)
        segment.time_index.refresh()
        last = segment.time_index.last_entry()
        if last is not None and last[0] < since_ms and base != bases[-1]:
            break
    return keep[::-1]


def recent_headers(log: PartitionLog, since_ms: int | None = None) -> Iterator[BatchHeader]:
    """The batch headers of `log`'s segments recent_bases takes, oldest first. Walked with no
    partition lock held: a segment that retention (another thread) took out of the list or
    deleted meanwhile is passed over, as a file deleted before the walk; each segment is read
    from one pinned file, so a cleaner's swap during the walk does not shift it."""
    for base in recent_bases(log, since_ms):
        segment = log.segments.get(base)
        if segment is None:
            continue
        try:
            for _, header in segment.pinned_headers_past_damage():  # (damage recovery kept: stepped over)
                yield header
        except FileNotFoundError:
            continue
