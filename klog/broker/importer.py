"""`klog dirs import PATH`: adopt a Kafka broker's log directory (or single partition folders).

The source is only read: its files are copied into the store (a broker's directory stays
usable). For each `<topic>-<partition>` folder found:

- Kafka's internal topics (`__consumer_offsets`, `__transaction_state`, ...) are not imported as
  topics; the committed offsets in `__consumer_offsets` become klog's groups' committed offsets
  (import_kafka_offsets), and `klog serve` writes its own `__consumer_offsets` from them;
- the topic is created with as many partitions as the highest partition number found + 1
  (replication factor 1; an existing topic is refused: import never merges logs);
- segments (`.log`, `.index`, `.timeindex`, `.txnindex`) keep their names and offsets; an index
  Kafka preallocated (a running broker's active segment: zero-filled to 10 MiB) is copied
  without its zero tail, as Kafka trims it; Kafka's in-progress files (`.cleaned`, `.swap`,
  `.deleted`, `.tmp`) are left out;
- every segment is validated as recovery does (magic 0, 1 and 2 are data; a torn tail is cut
  in the copy, never in the source, and reported);
- the log start offset comes from the source directory's `log-start-offset-checkpoint` (else
  the first segment's base), the leader epochs from `leader-epoch-checkpoint`, and the high
  watermark is the log end, so everything is readable at once;
- a compressed batch whose records expand past max.message.bytes and 100 times its own size (a
  decompression bomb) refuses the whole import, before anything is created;
- a partition holding a record whose attributes byte is >= 0x80 (unused by Kafka, written by no
  client, read differently by the compiled reader) is marked to be read by the strict decoder
  only (PartitionLog.mark_strict_records), and the import says so.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from klog.errors import DecompressionError, KlogError, TopicExistsError, UnknownCodecIdError, UsageError
from klog.store import checkpoints
from klog.store.format import (
    INDEX_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    LOG_SUFFIX,
    OFFSET_INDEX_ENTRY,
    TIME_INDEX_ENTRY,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_partition_dir,
    parse_segment_base,
)
from klog.store.names import validate_topic_name
from klog.store.plain import replace

if TYPE_CHECKING:
    from klog.broker.store_protocol import BrokerStore

_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
_ENTRY_SIZE = {INDEX_SUFFIX: OFFSET_INDEX_ENTRY.size, TIME_INDEX_SUFFIX: TIME_INDEX_ENTRY.size}


@dataclass
class ImportedPartition:
    topic: str
    partition: int
    source: str
    segments: int
    log_start_offset: int
    log_end_offset: int
    leader_epoch: int
    notes: list[str] = field(default_factory=list)


def find_partition_folders(paths: list[str]) -> dict[tuple[str, int], str]:
    """(topic, partition) -> folder, from log directories and/or partition folders."""
    found: dict[tuple[str, int], str] = {}
    for path in paths:
        path = os.path.abspath(path)
        if not os.path.isdir(path):
            raise UsageError(f"{path} is not a folder")
        parsed = parse_partition_dir(os.path.basename(path))
        if parsed is not None and _has_segments(path):
            candidates = [(parsed, path)]
        else:
            candidates = [(p, os.path.join(path, n)) for n in sorted(os.listdir(path))
                          if (p := parse_partition_dir(n)) is not None and os.path.isdir(os.path.join(path, n))]
        for key, folder in candidates:
            if key in found:
                raise UsageError(f"{key[0]}-{key[1]} is in both {found[key]} and {folder}")
            found[key] = folder
    if not found:
        raise UsageError(f"no Kafka partition folders (<topic>-<partition>) in {', '.join(paths)}")
    return found


def _has_segments(folder: str) -> bool:
    return any(n.endswith(LOG_SUFFIX) and parse_segment_base(n) is not None for n in os.listdir(folder))


def _copy_trimmed(src: str, dest: str, suffix: str) -> None:
    """Copy a file; an index loses its unused zero tail (Kafka preallocates the active one)."""
    entry = _ENTRY_SIZE.get(suffix)
    if entry is None:
        shutil.copyfile(src, dest)
        return
    with open(src, "rb") as f:
        data = f.read()
    end = len(data) - len(data) % entry
    zero = bytes(entry)
    while end >= entry and data[end - entry:end] == zero:
        end -= entry
    with open(dest, "wb") as f:
        f.write(data[:end])


# Kafka's own topics: group offsets, transaction state, KRaft metadata. Their records are the
# broker's bookkeeping in its own schemas, not data a klog consumer reads; never imported.
KAFKA_INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state", "__share_group_state", "__cluster_metadata")


def import_dirs(store: BrokerStore, paths: list[str]) -> list[ImportedPartition]:
    """Import every partition folder under `paths` (see the module docstring)."""
    folders = {k: v for k, v in find_partition_folders(paths).items() if k[0] not in KAFKA_INTERNAL_TOPICS}
    if not folders:
        raise UsageError(f"only Kafka's internal topics ({', '.join(KAFKA_INTERNAL_TOPICS)}) in {', '.join(paths)}: "
                         "nothing to import")
    topics: dict[str, int] = {}
    for topic, partition in folders:
        validate_topic_name(topic)
        topics[topic] = max(topics.get(topic, 0), partition + 1)
    for topic in topics:
        if store.has_topic(topic):
            raise TopicExistsError(f"topic '{topic}' already exists in the store; import does not merge logs "
                                   f"(delete it first or import into another data directory)")
    for folder in folders.values():  # before anything is created: a refusal leaves the store as it was
        problem = expansion_problem(folder)
        if problem is not None:
            raise KlogError(f"{problem}; nothing imported")
    start_offsets = _log_start_offsets({os.path.dirname(f) for f in folders.values()})
    for topic, count in sorted(topics.items()):
        store.create_topic(topic, count, replication_factor=1, adopt_folders=True)
    imported = [_import_partition(store, topic, p, folders[(topic, p)], start_offsets.get((topic, p)))
                for topic, p in sorted(folders)]
    for topic in sorted(topics):
        # Kafka keeps topic configs in its controller, not in the log directory; offset gaps that
        # only its cleaner leaves say the topic was compacted, and a reader must know that
        gapped = [p for p in range(topics[topic]) if _has_cleaner_gaps(store.partition(topic, p).leader)]
        for p in gapped:  # (as klog's cleaner marks a log it cleaned: the gaps stay readable if the policy changes)
            store.partition(topic, p).leader.mark_cleaned()
        if gapped:
            store.alter_topic(topic, set_configs={"cleanup.policy": "compact"})
            for item in imported:
                if item.topic == topic:
                    item.notes.append("offset gaps left by Kafka's log cleaner: topic set to cleanup.policy=compact")
    return imported


def expansion_problem(folder: str) -> str | None:
    """The first compressed batch in the folder's segments whose records expand past
    max(max.message.bytes, EXPANSION_RATIO_MAX x its size), named; None if there is none. Stops at
    the first batch it cannot frame (a torn tail: recovery deals with it). Decompression stops at
    the bound: a bomb costs no more memory than the bound."""
    from klog.store import compression
    from klog.store.codec import read_header
    from klog.store.format import MAGIC_OFFSET, RECORD_BATCH_OVERHEAD
    from klog.store.limits import EXPANSION_RATIO_MAX, batch_expansion_bytes_max

    for name in sorted(os.listdir(folder)):
        if not name.endswith(LOG_SUFFIX) or parse_segment_base(name) is None:
            continue
        path = os.path.join(folder, name)
        with open(path, "rb") as f:
            fd, size, pos = f.fileno(), os.fstat(f.fileno()).st_size, 0
            while pos + RECORD_BATCH_OVERHEAD <= size:
                head = os.pread(fd, RECORD_BATCH_OVERHEAD, pos)
                try:
                    header = read_header(head)
                except Exception:  # noqa: BLE001 - not a batch: recovery reports it
                    break
                if header.size <= MAGIC_OFFSET or pos + header.size > size:
                    break
                if head[MAGIC_OFFSET] == 2 and header.codec:
                    limit = batch_expansion_bytes_max(header.size)
                    body = os.pread(fd, header.size - RECORD_BATCH_OVERHEAD, pos + RECORD_BATCH_OVERHEAD)
                    with compression.expansion_limit(limit) as bound:
                        try:
                            compression.decompress(header.codec, body)
                        except (DecompressionError, UnknownCodecIdError):
                            if bound.exceeded:
                                return (f"{path}: the batch at offset {header.base_offset} ({header.size} bytes) "
                                        f"expands past {limit} bytes (max.message.bytes, or "
                                        f"{EXPANSION_RATIO_MAX}x its size): a decompression bomb")
                            break  # damage: recovery reports it
                pos += header.size
    return None


def _has_cleaner_gaps(log) -> bool:
    """Upward offset gaps between batches outside the active segment, or before its first batch
    (Kafka's cleaner drops batches it emptied; the active segment is never cleaned)."""
    log.refresh_segments()
    expected = None
    for i, base in enumerate(log.bases):
        for _, header in log.segments[base].pinned_headers():
            if expected is not None and header.base_offset > expected:
                return True
            expected = header.next_offset
            if i == len(log.bases) - 1:
                break  # (the active segment's first batch only: the sealed segments before it may end in a gap)
    return False


def _log_start_offsets(log_dirs: set[str]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for d in log_dirs:
        path = os.path.join(d, LOG_START_OFFSET_CHECKPOINT)
        if os.path.exists(path):
            out.update(checkpoints.read_offsets(path))
    return out


def _import_partition(store: BrokerStore, topic: str, partition: int, source: str,
                      log_start: int | None) -> ImportedPartition:
    part = store.partition(topic, partition)
    dest = part.leader.directory
    in_place = os.path.realpath(source) == os.path.realpath(dest)  # copied by hand into the log dir
    os.makedirs(dest, exist_ok=True)
    if not in_place:
        for name in os.listdir(dest):  # a new topic: whatever is there is klog's empty first segment
            os.unlink(os.path.join(dest, name))
    copied = 0
    for name in sorted(os.listdir(source)):
        suffix = name[20:] if parse_segment_base(name) is not None else ""
        if suffix in _SEGMENT_SUFFIXES:
            if not in_place:
                _copy_trimmed(os.path.join(source, name), os.path.join(dest, name), suffix)
            copied += suffix == LOG_SUFFIX
    epochs = []
    epoch_file = os.path.join(source, LEADER_EPOCH_CHECKPOINT)
    if os.path.exists(epoch_file):
        epochs = checkpoints.read_leader_epochs(epoch_file)
    notes = []
    with part.lock:
        part.leader.refresh_segments()
        part.open_for_write()
        for report in part.last_recovery:
            notes.extend(f"copy repaired: {r}" for r in report.reasons)
        high = part.leader.first_high_attributes_offset()
        if high is not None:
            part.leader.mark_strict_records()
            notes.append(f"offset {high} has a record attributes byte >= 0x80 (unused by Kafka): "
                         "this partition is read with klog's strict decoder only")
        end = part.leader.log_end_offset
        first = part.leader.first_offset()
        start = max(first, log_start) if log_start is not None else first
        if start > end:
            raise KlogError(f"{source}: log-start-offset-checkpoint says {start}, above the log end {end}")
        meta = store.topics.get(topic).partitions[partition]
        epoch = epochs[-1][0] if epochs else meta.leader_epoch
        meta = replace(meta, leader_epoch=epoch, epochs=[list(e) for e in epochs] or meta.epochs)
        store.topics.update_partition(topic, partition, meta)
        store.forget_topic_metadata(topic)
        snap = part.snapshot()
        snap.high_watermark, snap.log_start_offset, snap.leader_epoch = end, start, epoch
        part.state.write(snap, sync=True)
        part.leader_epoch_loaded = epoch
    return ImportedPartition(topic, partition, source, copied, start, end, epoch, notes)


# -- the broker's committed offsets (its __consumer_offsets partitions) ----------------------------
@dataclass(frozen=True)
class ImportedOffsets:
    groups: int
    offsets: int
    skipped: int  # offsets of topics not in the store after the import (another broker's partitions)
    unreadable: int = 0  # records that are not in Kafka's format (left out)


def read_kafka_offsets(folders: list[str]) -> tuple[dict[tuple[str, str, int], tuple[int, str, int]], int]:
    """(group, topic, partition) -> (offset, metadata, commit ms): what the `__consumer_offsets`
    partition folders say last (Kafka's record format, klog.broker.group_records), tombstones and
    aborted transactional commits (TxnOffsetCommit) applied as Kafka's coordinator applies them; and
    how many records were not in Kafka's format (left out)."""
    from klog.broker import group_records as gr
    from klog.store import codec
    from klog.store.format import CONTROL_FLAG_MASK, MAGIC_V2, TRANSACTIONAL_FLAG_MASK
    from klog.store.walk import walk_batches

    latest: dict[tuple[str, str, int], tuple[int, str, int]] = {}
    unreadable = 0

    def apply(key: bytes | None, value: bytes | None) -> None:
        nonlocal unreadable
        try:
            decoded = gr.decode_key(key) if key else None
            if not isinstance(decoded, gr.OffsetKey):
                return  # group metadata and newer record types: klog keeps membership itself
            tp = (decoded.group, decoded.topic, decoded.partition)
            if value is None:
                latest.pop(tp, None)
            else:
                v = gr.decode_offset_value(value)
                latest[tp] = (v.offset, v.metadata, v.commit_ms)
        except (KlogError, UnicodeDecodeError):
            unreadable += 1

    for folder in folders:
        pending: dict[int, list[tuple[bytes | None, bytes | None]]] = {}  # producer id -> uncommitted records
        for name in sorted(n for n in os.listdir(folder) if n.endswith(LOG_SUFFIX)):
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                for walked in walk_batches(lambda pos, n, fd=f.fileno(): os.pread(fd, n, pos), 0, size,
                                           whole=True, path=path):
                    header = walked.header
                    if header.magic != MAGIC_V2:
                        continue  # Kafka has written v2 batches here since 0.11
                    records = codec.decode_batch_records(walked.data(), 0, header, trust_attributes=False)
                    if header.attributes & CONTROL_FLAG_MASK:
                        for _, _, key, _, _ in records:
                            committed = key is not None and len(key) >= 4 and key[2:4] == b"\x00\x01"
                            for k, v in pending.pop(header.producer_id, []):
                                if committed:
                                    apply(k, v)
                        continue
                    for _, _, key, value, _ in records:
                        if header.attributes & TRANSACTIONAL_FLAG_MASK:
                            pending.setdefault(header.producer_id, []).append((key, value))
                        else:
                            apply(key, value)
    return latest, unreadable


def import_kafka_offsets(store: BrokerStore, paths: list[str]) -> ImportedOffsets | None:
    """The committed offsets in the `__consumer_offsets` folders under `paths`, into klog's groups
    (GroupsMeta, as a Kafka client's commit: negative offsets kept), for the topics the store has;
    None when there are no such folders."""
    from klog.meta.groups import GroupsMeta

    folders = [f for (topic, _), f in sorted(find_partition_folders(paths).items()) if topic == "__consumer_offsets"]
    if not folders:
        return None
    latest, unreadable = read_kafka_offsets(folders)
    known = {t.name for t in store.list_topics()}
    by_commit: dict[tuple[str, int], dict[tuple[str, int], tuple[int, str]]] = {}
    skipped = 0
    for (group, topic, partition), (offset, metadata, commit_ms) in latest.items():
        if topic not in known:
            skipped += 1
            continue
        by_commit.setdefault((group, commit_ms), {})[(topic, partition)] = (offset, metadata)
    meta = GroupsMeta(store.meta)
    for (group, commit_ms), offsets in sorted(by_commit.items()):
        meta.store_offsets(group, offsets, commit_ms=commit_ms, negative_ok=True)
    return ImportedOffsets(len({g for g, _ in by_commit}), sum(len(o) for o in by_commit.values()), skipped,
                           unreadable)
