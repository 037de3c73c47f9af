"""`klog verify`: check every replica's batches and indexes; optionally repair.

Repair rebuilds indexes and truncates a torn tail; a replica damaged before its tail is cut at
the damage and re-copied from an in-sync replica that is intact (Kafka does not do this). It
also catches up replicas that are out of sync but healthy again, which otherwise waits for the
partition's next write.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from klog.broker import data_loss
from klog.broker.replication import ReplicaManager, catch_up
from klog.errors import CorruptLogError, KlogError
from klog.store import faults
from klog.store.format import LOG_SUFFIX, TXN_INDEX_SUFFIX, parse_segment_base, segment_file_name
from klog.store.inspect import TxnWalk, check_segment
from klog.store.plain import FrozenPlain
from klog.store.segment import CORRUPT_SUFFIX
from klog.store.txn import write_txn_index

if TYPE_CHECKING:
    from collections.abc import Iterator

    from klog.broker.store_protocol import BrokerStore
    from klog.meta.topics import PartitionMeta
    from klog.store.log import PartitionLog
    from klog.store.resume import Resumed
    from klog.store.segment import LogSegment
    from klog.store.state import PartitionSnapshot

DISCARDED_SUFFIX = ".discarded" + CORRUPT_SUFFIX  # bytes --discard-damaged moved aside: the user chose so
DELETING_SUFFIX = ".deleting"  # Store.delete_topic's name for a folder on its way out
# a foreign log (written into the store by another tool) holding a record attributes byte >= 0x80
# that `dirs import` did not see (see PartitionLog.mark_strict_records)
UNMARKED_HIGH_ATTRIBUTES = "a record attributes byte >= 0x80 in a log not marked for strict decoding"


def verify_store(store: BrokerStore, topic: str | None = None, repair: bool = False) -> list[dict]:
    topics = [topic] if topic else store.topic_names()
    reports = []
    for name in topics:
        meta = store.topic(name)
        for p in range(len(meta.partitions)):
            part = store.partition(name, p)
            pm = meta.partitions[p]
            order = [pm.leader] + [r for r in pm.isr if r != pm.leader]
            part.set_replica_dirs([store.data_dir.log_dir_path(d) for d in order])
            snap = part.state.read_valid()
            checked = [(d, replica, _check_replica(replica, snap)) for d, replica in zip(order, part.replicas,
                                                                                         strict=True)]
            state_problem = _check_state(part, snap)
            for d, replica, check in checked:
                problems = check.problems + ([state_problem] if state_problem and d == pm.leader else [])
                report = {"topic": name, "partition": p, "log_dir": d, "ok": not problems, "repaired": False,
                          "problems": list(problems)}
                if repair and problems:
                    healthy = next((r for _, r, c in checked if not c.problems and r is not replica), None)
                    try:
                        report["repaired"] = _repair(part, replica, check, healthy, report["problems"],
                                                     snap.high_watermark if snap is not None else 0)
                    except KlogError as e:  # e.g. a file klog will not write through (a symbolic link)
                        report["problems"].append(f"not repaired: {e}")
                reports.append(report)
            if repair:
                reports.extend(_rejoin(store, name, p, part))
    if topic is None:
        reports.extend(_placement_counts(store, repair))
        reports.extend(_unknown_partition_folders(store, repair))
        reports.extend(_unfinished_deletes(store, repair))
    return reports


def _placement_counts(store: BrokerStore, repair: bool) -> list[dict]:
    """The replica counts and name keys kept beside the topics (klog.meta.topic_index) against the
    topics themselves; --repair counts them again."""
    problems = store.topics.index_problems()
    if not problems:
        if repair:
            store.topics.rebuild_index(only_if_absent=True)  # nothing wrong: a store from before it gets one
        return []
    repaired = False
    if repair:
        store.topics.rebuild_index()
        repaired = True
        problems.append("repaired: rebuilt the placement counts from the topics")
    return [{"topic": None, "partition": None, "log_dir": None, "ok": False, "repaired": repaired,
             "problems": problems}]


def _unfinished_deletes(store: BrokerStore, repair: bool) -> list[dict]:
    """Folders `klog topics delete` renamed aside but could not remove (a read-only disk, a
    permission): never read as a topic, reported until removed; --repair removes them."""

    out = []
    for d in store.log_dir_ids():
        path = store.data_dir.log_dir_path(d)
        try:
            names = sorted(n for n in os.listdir(path) if n.endswith(DELETING_SUFFIX))
        except OSError:
            continue
        for n in names:
            folder = os.path.join(path, n)
            out.append(_leftover_folder(None, None, d, folder, "left over from a topic delete that could not remove "
                                        "it", repair))
    return out


def _leftover_folder(topic: str | None, partition: int | None, log_dir: int, folder: str, what: str,
                     repair: bool) -> dict:
    """The report of a folder klog left behind (`what` it is); with `repair`, the folder removed."""
    import shutil

    problems = [f"{folder}: {what}"]
    repaired = False
    if repair:
        errors: list[str] = []
        shutil.rmtree(folder, onerror=lambda _f, p, exc, errors=errors: errors.append(
            f"{p}: {exc[1].strerror or exc[1]}"))
        repaired = not errors
        problems.append("repaired: removed" if repaired else f"still cannot remove: {errors[0]}")
    return {"topic": topic, "partition": partition, "log_dir": log_dir, "ok": False, "repaired": repaired,
            "problems": problems}


def _unknown_partition_folders(store: BrokerStore, repair: bool = False) -> list[dict]:
    """Partition folders no topic owns: a Kafka broker's, copied in by hand, are never touched (the
    report says how to adopt them); one holding no record at all (what a partition opened while
    its topic was deleted leaves) keeps its name from being created again, and --repair removes it."""

    from klog.store.format import LOG_SUFFIX, parse_partition_dir

    reports = []
    for d in store.log_dir_ids():
        path = store.data_dir.log_dir_path(d)
        try:
            names = sorted(os.listdir(path))
        except OSError:
            continue
        for n in names:
            parsed = parse_partition_dir(n)
            folder = os.path.join(path, n)
            if parsed is None or not os.path.isdir(folder):
                continue
            t, p = parsed
            meta = store.topics.find(t)
            if meta is not None and p < len(meta.partitions):
                continue
            files = os.listdir(folder)
            if not any(f.endswith(LOG_SUFFIX) for f in files):
                continue
            if all(os.path.getsize(os.path.join(folder, f)) == 0 for f in files if f.endswith(LOG_SUFFIX)):
                reports.append(_leftover_folder(t, p, d, folder, "a partition folder no topic owns, without records "
                                                "(left by a topic delete)", repair))
                continue
            reports.append({"topic": t, "partition": p, "log_dir": d, "ok": False, "repaired": False,
                            "problems": [f"{folder}: a partition folder no topic of this store owns (left as it "
                                         f"is); adopt it with: klog dirs import {folder}"]})
    return reports


def _check_state(part, snap) -> str | None:
    """The state file must be readable wherever the log holds data (the log end against the high
    watermark is checked per replica)."""
    if snap is None and part.holds_data():
        return f"{part.state.path}: missing or damaged, so the high watermark is unknown"
    return None


def _rejoin(store: BrokerStore, topic: str, partition: int, part) -> list[dict]:
    """Catch up the healthy out-of-sync replicas now; one report for each that rejoined."""
    before = set(store.topics.get(topic).partitions[partition].isr)
    try:
        with part.lock:
            after = ReplicaManager(store).reconcile(topic, partition, part).isr
    except KlogError as e:  # e.g. no leader: reported, and the other partitions still get checked
        # the partition's report, not one replica's (log_dir None)
        return [{"topic": topic, "partition": partition, "log_dir": None, "ok": False, "repaired": False,
                 "problems": [f"cannot catch up its replicas: {e}"]}]
    return [{"topic": topic, "partition": partition, "log_dir": d, "ok": False, "repaired": True,
             "problems": ["repaired: caught up from the leader and rejoined the ISR"]}
            for d in after if d not in before]


@dataclass
class ReplicaCheck:
    """What verify found in one replica: its problems, the offset to truncate at when the log
    itself is damaged, and the .txnindex each segment must hold where it holds something else
    (by segment base: what --repair writes)."""

    problems: list[str]
    cut_at: int | None = None
    txn_indexes: dict[int, list] = field(default_factory=dict)


def _check_replica(replica, snap) -> ReplicaCheck:
    """One walk over each segment of the replica: its batches and the three indexes of each."""
    if os.path.islink(replica.directory):
        return ReplicaCheck([f"{replica.directory}: a symbolic link, not a partition folder (klog never follows it)"])
    if not os.path.isdir(replica.directory):
        if snap is None or snap.high_watermark == 0:
            return ReplicaCheck([])  # a partition never written has no folder yet
        return ReplicaCheck([f"{replica.directory}: the partition folder is missing (high watermark "
                             f"{snap.high_watermark})"], 0)
    replica.refresh_segments()
    problems = (_kept_corrupt_bytes(replica.directory) + _unreadable_segment_names(replica.directory)
                + _symbolic_links(replica.directory))
    lost = data_loss.unacknowledged([replica.directory])
    if lost is not None:
        problems.append(f"{lost}; the partition takes no writes until --repair acknowledges the loss")
    cut_at = None
    expected = snap.log_start_offset if snap is not None else None  # the next offset the log must hold
    log_end = None
    txns = TxnWalk(whole_history=bool(replica.bases) and replica.bases[0] == 0 and not replica.cleaner_gaps)
    txn_indexes = {}
    high = None  # the first record whose attributes byte is >= 0x80
    for i, base in enumerate(replica.bases):
        segment = replica.segments[base]
        compacted, last = replica.cleaner_gaps, i == len(replica.bases) - 1
        if not last and _below_log_start(replica, i, snap):
            # only its deletion is pending (retention, delete-records or --discard-damaged killed
            # before it): no reader reaches it, whatever it holds
            expected = log_end = replica.bases[i + 1]
            txns.whole_history = False  # (a transaction may begin in what the walk stepped over)
            continue
        try:
            check = check_segment(segment, gaps_ok=compacted and not last,
                                  max_message_bytes=replica.config.max_message_bytes, sealed=not last, txns=txns)
        except OSError as e:  # unreadable (EIO, EACCES, not a file): damage a reader would hit too
            problems.append(f"{segment.log_path}: cannot read: {e.strerror or e}")
            cut_at = base if expected is None else min(base, expected)
            break
        except KlogError as e:  # an index that is a symbolic link, ...: this replica's problem, not verify's end
            if str(e) not in problems:
                problems.append(str(e))
            break
        problems.extend(_index_problem_lines(segment, check.index_problems))
        if check.txn_index is not None:
            txn_indexes[base] = check.txn_index
        if high is None:
            high = check.high_attributes_offset
        if (expected is not None and check.first_offset is not None and not _follows(check.first_offset, expected, i)
                and not (compacted and check.first_offset > expected)):  # Kafka's cleaner removed the offsets between
            problems.append(f"{segment.log_path}: " + (f"offsets {expected}..{check.first_offset - 1} are missing"
                            if check.first_offset > expected else f"overlaps the segment before (from {expected})"))
            cut_at = expected
            break
        if check.log_problem and _below_log_start(replica, i, snap):
            expected = log_end = replica.bases[i + 1] if i + 1 < len(replica.bases) else snap.high_watermark
            txns.whole_history = False  # (a transaction may begin in what the walk stepped over)
            continue  # delete-records moved the log start past this damage: no reader reaches it
        if check.log_problem:
            last = i == len(replica.bases) - 1
            problems.append(f"{segment.log_path}: {check.log_problem}" + ("" if last else " (before the log's tail)"))
            cut_at = check.valid_next_offset if check.valid_next_offset is not None else base
            break
        if check.valid_next_offset is not None:
            expected = log_end = check.valid_next_offset
        elif i and expected is not None and base != expected and not (compacted and not last and base > expected):
            # (a compacted log's sealed segment may be empty: the cleaner removed every batch of it)
            problems.append(f"{segment.log_path}: an empty segment at offset {base}, but the log before it ends "
                            f"at {expected}")
            cut_at = expected
            break
    if not problems and not replica.strict_records and high is not None:  # (every batch was walked)
        problems.append(f"{replica.directory}: {UNMARKED_HIGH_ATTRIBUTES} (offset {high}): klog's compiled reader "
                        "would read such a record differently from Kafka; --repair marks the partition to be "
                        "read with the strict decoder")
    if log_end is None:  # no batch at all: the log ends where it must start (an empty log past a discard)
        log_end = expected or 0
    if not problems and snap is not None and log_end < snap.high_watermark:
        problems.append(f"{replica.directory}: the log ends at offset {log_end}, below the high watermark "
                        f"{snap.high_watermark}")
        cut_at = log_end
    return ReplicaCheck(problems, cut_at, txn_indexes)


def _below_log_start(replica: PartitionLog, i: int, snap: PartitionSnapshot | None) -> bool:
    """Is every offset of the replica's i-th segment below the log start (only its deletion is pending)?"""
    if snap is None:
        return False
    end = replica.bases[i + 1] if i + 1 < len(replica.bases) else snap.high_watermark
    return end <= snap.log_start_offset


def _kept_corrupt_bytes(folder: str) -> list[str]:
    """`.corrupt` files recovery left: acknowledged records it had to cut (loud until deleted)."""
    out = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(CORRUPT_SUFFIX) and not name.endswith(DISCARDED_SUFFIX):
            path = os.path.join(folder, name)
            out.append(f"{path}: {os.path.getsize(path)} bytes of acknowledged records that recovery cut from the "
                       f"log as damaged; inspect them, then delete the file")
    return out


def _unreadable_segment_names(folder: str) -> list[str]:
    """`.log` files no reader takes for a segment (a name that is no offset Kafka can have, such as
    99999999999999999999.log): records in them are not part of the log, which must be said."""
    return [f"{os.path.join(folder, name)}: not read as a segment (its name is not a 20-digit offset up to "
            f"2^63-1); any records in it are not part of the log"
            for name in sorted(os.listdir(folder)) if name.endswith(LOG_SUFFIX) and parse_segment_base(name) is None]


def _symbolic_links(folder: str) -> list[str]:
    """Files of the partition that are symbolic links: klog never reads or writes through one (a
    writer refuses the partition), so each is named, even one a read would not reach."""
    return [f"{os.path.join(folder, name)} is a symbolic link; klog never reads or writes through one"
            for name in sorted(os.listdir(folder)) if os.path.islink(os.path.join(folder, name))]


def _follows(first: int, expected: int, i: int) -> bool:
    """A segment's first batch starts where the log before it ends (the first segment may also
    start inside its first batch's range when delete-records moved the start into it)."""
    return first == expected or (i == 0 and first < expected)


def _index_problem_lines(segment, found: list[str]) -> list[str]:
    """One line per index file (a broken index can have millions of bad entries), each under its
    own path: each problem starts with the name of the index it is about."""
    lines = []
    txn_index_path = os.path.join(segment.directory, segment_file_name(segment.base_offset, TXN_INDEX_SUFFIX))
    for path, kind in ((segment.offset_index.path, "offset index"), (segment.time_index.path, "time index"),
                       (txn_index_path, "txn index")):
        problems = [x for x in found if x.startswith(kind)]
        if problems:
            more = len(problems) - 1
            lines.append(f"{path}: {len(problems)} index problems: {problems[0]}" + (f" (and {more} more)" if more
                                                                                     else ""))
    return lines


def _repair(part, replica, check: ReplicaCheck, healthy, notes: list[str], hw: int) -> bool:
    cut_at = check.cut_at
    if cut_at is not None and healthy is None and cut_at < hw:
        # cutting would drop committed records nobody else holds (and what follows the damage):
        # leave the files for inspection; readers keep failing loudly at the damage
        notes.append(f"not repaired: a repair would cut committed offsets {cut_at}..{hw - 1} (from the damage on) "
                     "and no intact replica holds them; "
                     f"read what is readable with 'klog consume {part.topic} --skip-damaged', then drop the damage "
                     f"with 'klog verify {part.topic} --repair --discard-damaged'")
        return False
    with part.lock:
        part.open_for_write()
        if data_loss.acknowledge(replica.directory) is not None:
            notes.append(f"repaired: the loss is acknowledged; writes go on from offset {replica.log_end_offset}")
        if cut_at is None:
            if any(UNMARKED_HIGH_ATTRIBUTES in n for n in notes):
                replica.mark_strict_records()
                notes.append("repaired: marked to be read with the strict decoder only")
                return True
            last = replica.bases[-1] if replica.bases else None
            for base in list(replica.bases):
                replica.segments[base].recover(sealed=base != last)  # (the active segment: no final time entry)
            notes.append("repaired: rebuilt indexes")
            _rewrite_txn_indexes(replica, check.txn_indexes, notes)
            return True
        replica.truncate_to(cut_at)
        notes.append(f"repaired: truncated at offset {cut_at}")
        if healthy is not None:
            end = catch_up(healthy, replica, healthy.log_end_offset)
            notes.append(f"repaired: re-copied offsets {cut_at}..{end} from {healthy.directory}")
        if check.txn_indexes or any(_txn_index_files(r.directory) for r in (replica, healthy) if r is not None):
            # the markers past the cut are gone and the re-copied ones have no entries yet: the
            # .txnindex files as the log now is (a walk of it again; only where transactions aborted)
            _rewrite_txn_indexes(replica, _check_replica(replica, None).txn_indexes, notes)
        part.publish()
    return True


def _txn_index_files(folder: str) -> list[str]:
    try:
        return [name for name in os.listdir(folder) if name.endswith(TXN_INDEX_SUFFIX)]
    except OSError:
        return []


def _rewrite_txn_indexes(replica, txn_indexes: dict[int, list], notes: list[str]) -> None:
    """Write each segment's `.txnindex` as the ABORT markers say (Kafka's recovery rebuilds it
    from producer state; klog's from the log it just walked)."""
    for base, entries in sorted(txn_indexes.items()):
        write_txn_index(replica.directory, base, entries)
    if txn_indexes:
        notes.append(f"repaired: rewrote the .txnindex of {len(txn_indexes)} segment(s) from the transaction markers")


# -- --discard-damaged: a way out when no intact replica holds the damaged records -------------------------
@dataclass
class Discard:
    """What `verify --repair --discard-damaged` does to one partition: the damage starts at
    `damaged_from`, and `resume` is the first offset past it reading can go on at (store/resume.py):
    offsets damaged_from..resume-1 are discarded, leaving an offset gap readers step over (as
    over a compacted log's); the records before and after it stay, and the log start
    (`log_start`) is unchanged; the damaged bytes are kept aside in `.corrupt` files."""

    topic: str
    partition: int
    log_start: int
    damaged_from: int
    resume: int
    corrupt_files: list[str] = field(default_factory=list)
    # transactions whose marker was discarded and whose outcome nothing proves: left open, (producer
    # id, producer epoch, start offset) each, for `klog transactions abort --start-offset` to end
    hanging: list[tuple[int, int, int]] = field(default_factory=list)
    # transactions whose marker was discarded, whose outcome nothing proves, and which the next marker
    # of their producer (a later transaction's) now ends with its outcome: (producer id, epoch, start)
    unknown: list[tuple[int, int, int]] = field(default_factory=list)

    @property
    def lost(self) -> str:
        return f"{self.damaged_from}..{self.resume - 1}"


def plan_discards(store: BrokerStore, topic: str | None = None) -> list[Discard]:
    """The partitions whose committed records are damaged with no intact replica to re-copy them
    from, and what discarding the damage would lose (nothing is changed)."""
    out = []
    for name in [topic] if topic else store.topic_names():
        meta = store.topic(name)
        for p in range(len(meta.partitions)):
            found = _damage(store, name, p, meta.partitions[p])
            if found is not None:
                out.append(found[0])
    return out


class _Place(FrozenPlain):
    """Where one replica's damage is: its segment's base, where the damaged bytes start, and
    the first valid batch after them in that segment (store/resume.py; None: none there)."""

    _fields = ("replica", "base", "position", "resumed")
    replica: PartitionLog
    base: int
    position: int
    resumed: Resumed | None

    def __init__(self, replica: PartitionLog, base: int, position: int, resumed: Resumed | None) -> None:
        object.__setattr__(self, "replica", replica)
        object.__setattr__(self, "base", base)
        object.__setattr__(self, "position", position)
        object.__setattr__(self, "resumed", resumed)


def _damage(store: BrokerStore, name: str, p: int,
            pm: PartitionMeta) -> tuple[Discard, list[_Place]] | None:
    """The damaged range of a partition every replica of which is cut below its high watermark, and
    where each replica's damage starts and reading resumes after it; None otherwise. Reading
    resumes at the first provably valid batch after the damage in its segment (store/resume.py),
    else at the next segment: the same place `klog consume --skip-damaged` goes on at."""
    part = store.partition(name, p)
    order = [pm.leader] + [r for r in pm.isr if r != pm.leader]
    part.set_replica_dirs([store.data_dir.log_dir_path(d) for d in order])
    snap = part.state.read_valid()
    if snap is None:
        return None
    checked = [(replica, _check_replica(replica, snap)) for replica in part.replicas]
    if any(not check.problems for _, check in checked):
        return None  # an intact replica: plain --repair re-copies from it
    cuts = [(replica, check.cut_at) for replica, check in checked
            if check.cut_at is not None and check.cut_at < snap.high_watermark]
    if len(cuts) != len(checked):
        return None  # some replica's problem is not damaged records: --repair's business
    hw = snap.high_watermark
    places = []
    for replica, cut in cuts:
        replica.refresh_segments()
        base = max((b for b in replica.bases if b <= cut), default=replica.bases[0])
        segment = replica.segments[base]
        position = _damage_position(segment, replica.config.max_message_bytes)
        later = [b for b in replica.bases if b > base]
        resumed = segment.resume_after_damage(position, cut, min(later[0], hw) if later else hw,
                                              end_offset=later[0] if later else hw)
        places.append(_Place(replica, base, position, resumed))
    resume = _common_resume(places, hw)
    cut_at = min(cut for _, cut in cuts)
    return Discard(name, p, snap.log_start_offset, cut_at, resume), places


def _next_base(place: _Place, hw: int) -> int:
    later = [b for b in place.replica.bases if b > place.base]
    return min(later[0], hw) if later else hw


def _common_resume(places: list[_Place], hw: int) -> int:
    """The offset every replica resumes at: the furthest of theirs, if each holds a batch
    starting there in its damaged segment; else the furthest next segment (what a replica
    without a resume point there goes on at)."""
    resume = max(p.resumed.header.base_offset if p.resumed is not None else _next_base(p, hw) for p in places)
    if all(p.resumed is not None and _batch_at(p, resume) is not None for p in places):
        return resume
    return max(max(_next_base(p, hw) for p in places), resume)


def _batch_at(place: _Place, offset: int) -> int | None:
    """The position of the batch starting at `offset` in the place's segment, from its resume point on."""
    from klog.store.walk import walk_batches

    if place.resumed is None:
        return None
    segment = place.replica.segments[place.base]
    try:
        for batch in walk_batches(segment.read_bytes, place.resumed.position, segment.file_size(),
                                  path=segment.log_path):
            if batch.header.base_offset >= offset:
                return batch.position if batch.header.base_offset == offset else None
    except KlogError:
        return None
    return None


def _damage_position(segment: LogSegment, max_message_bytes: int) -> int:
    """Where the segment's valid bytes end (the walker every check uses)."""
    from klog.store import validate

    scan = validate.SegmentScan(segment.read_bytes, segment.file_size(), segment.base_offset, deep=True,
                                max_message_bytes=max_message_bytes)
    for _ in scan:
        pass
    return scan.valid_bytes


def discard_damaged(store: BrokerStore, topic: str | None = None) -> list[Discard]:
    """Drop each damaged range's bytes from its segment: the segment is rewritten without them (the
    batches before the damage and from the first offset reading resumes at on), leaving an offset
    gap readers step over as over a compacted log's (the replica is marked so: PartitionLog.
    mark_cleaned); the log start stays, and the damaged bytes are kept in a `.discarded.corrupt`
    file. Records outside the damaged range are not lost: the Discards say which offsets are.

    Crash-safe as compaction is (an active damaged segment is rolled first, so the rewritten one
    is sealed): the damaged bytes are kept (fsynced), the rewrite is written under `.cleaned`
    names (fsynced: a writer's open removes those, so a kill before the swap leaves the log as it
    was, and a second discard does it again), then swapped in by the cleaner's swap (cleaner.
    swap_in: `.cleaned` -> `.swap` -> the segment's names, which a writer's open finishes or rolls
    back, so a kill leaves each segment either old or rewritten)."""
    from klog.store.cleaner import CleanedSegment, swap_in
    from klog.store.txn import read_txn_index

    done = []
    for name in [topic] if topic else store.topic_names():
        meta = store.topic(name)
        for p in range(len(meta.partitions)):
            if _damage(store, name, p, meta.partitions[p]) is None:
                continue
            part = store.partition(name, p)
            with part.lock:
                part.open_for_write()
                found = _damage(store, name, p, meta.partitions[p])  # again: as the files are under the lock
                if found is None:
                    continue
                plan, places = found
                rewrites = []
                markers = None
                for place in places:
                    replica, base = place.replica, place.base
                    if base == replica.bases[-1]:  # never rewrite the active segment: roll past it first
                        replica.roll(replica.log_end_offset)
                        replica.flush()
                    segment = replica.segments[base]
                    resumed_at = _batch_at(place, plan.resume)  # (None: none in the segment, its end)
                    end = segment.file_size() if resumed_at is None else resumed_at
                    # (from the batch holding the first damaged offset: a replica damaged further on
                    # drops the same offsets as the others, so the replicas keep the same batches)
                    start = _first_batch_reaching(segment, place.position, plan.damaged_from)
                    plan.corrupt_files.append(_keep_discarded(segment, start, end))
                    later = [b for b in replica.bases if b > base]  # (one at least: the active one)
                    fill_to = later[0] if replica.segments[later[0]].file_size() == 0 else None
                    entries = read_txn_index(replica.directory, base) or []
                    # a transaction marker among the discarded batches is written again in their
                    # place: without it, its transaction stays open for ever (read_committed readers
                    # stop at its first record, and no `transactions abort` ends it: the coordinator
                    # has it complete): ABORT where a .txnindex entry says so, else as the transaction
                    # coordinator completed it. Found once, from every replica's entries, so that the
                    # replicas keep the same batches
                    if markers is None:
                        every = {e for q in places for e in read_txn_index(q.replica.directory, q.base) or []}
                        markers = _lost_markers(store, replica, segment, start, end, plan, sorted(
                            every, key=lambda e: (e.last_offset, e.producer_id)))
                    temps = _write_without(replica, segment, start, end, fill_to, markers)
                    rewrites.append((replica, CleanedSegment(base, replica.directory, temps, tuple(entries))))
                faults.point("discard-written")
                for replica, cleaned in rewrites:
                    swap_in(replica, [cleaned])
                    replica.refresh_segments()
                faults.point("discard-renamed")
                for place in places:
                    if _txn_index_files(place.replica.directory):
                        _rewrite_txn_indexes(place.replica, _check_replica(place.replica, None).txn_indexes, [])
                part.publish()
            done.append(plan)
    return done


def _first_batch_reaching(segment: LogSegment, damage_position: int, offset: int) -> int:
    """Where the first batch of the segment holding `offset` or a later one starts, at most
    `damage_position` (the batches before the damage are whole: the walk stops there)."""
    from klog.store.walk import walk_batches

    for batch in walk_batches(segment.read_bytes, 0, damage_position, path=segment.log_path):
        if batch.header.last_offset >= offset:
            return batch.position
    return damage_position


def _keep_discarded(segment: LogSegment, start: int, end: int) -> str:
    """Bytes [start, end) of the segment kept in a `.discarded.corrupt` file beside it."""
    from klog.store.segment import keep_corrupt_bytes

    kept = keep_corrupt_bytes(segment.log_path, start, end)
    named = kept[:-len(CORRUPT_SUFFIX)] + DISCARDED_SUFFIX
    os.replace(kept, named)
    return named


def _write_without(replica: PartitionLog, segment: LogSegment, start: int, end: int,
                   fill_to: int | None, markers: list[bytes] | None = None) -> tuple[str, str, str]:
    """The sealed segment without its bytes [start, end) (the damaged batch), its log and both
    indexes (built as appends build them) written under the `.cleaned` names cleaner.swap_in
    takes, fsynced. Returns their paths (log, offset index, time index).

    `fill_to`: the base of the next segment when it is empty: offsets up to it that no batch
    holds any more (the damage was the log's last batches) are held by an empty batch at the
    end, as the cleaner keeps its round's last batch (cleaner.RETAIN_EMPTY), so that the log's
    end stays provable from its batches (recovery removes an empty segment past the log end;
    a reader waiting for the offsets below the end finds where they went)."""
    from klog.store import codec
    from klog.store.format import CLEANED_SUFFIX, INDEX_SUFFIX, RELATIVE_OFFSET_MAX, TIME_INDEX_SUFFIX
    from klog.store.index import IndexBuilder
    from klog.store.names import fsync_dir, open_nofollow
    from klog.store.walk import SCAN_CHUNK_BYTES, walk_batches

    size = segment.file_size()
    headers = []
    whole = True
    try:
        for batch in walk_batches(segment.read_bytes, 0, start, path=segment.log_path):
            headers.append((batch.position, batch.header))
    except CorruptLogError:
        whole = False  # more damage further on: copied as it is (verify names it; a second discard drops it)
    middle = markers or []
    at = start
    for marker in middle:
        headers.append((at, codec.read_header(marker)))
        at += len(marker)
    middle_bytes = b"".join(middle)
    try:
        for batch in walk_batches(segment.read_bytes, end, size, path=segment.log_path):
            headers.append((batch.position - (end - start) + len(middle_bytes), batch.header))
    except CorruptLogError:
        whole = False
    filler = b""
    kept_end = headers[-1][1].next_offset if headers else segment.base_offset
    if (whole and fill_to is not None and kept_end < fill_to
            and fill_to - 1 - segment.base_offset <= RELATIVE_OFFSET_MAX):
        epoch = headers[-1][1].leader_epoch if headers else codec.KLOG_LEADER_EPOCH
        filler = codec.write_batch([], base_offset=kept_end, attributes=0, last_offset_delta=fill_to - 1 - kept_end,
                                   base_timestamp=-1, max_timestamp=-1, leader_epoch=epoch)
        headers.append((start + len(middle_bytes) + size - end, codec.read_header(filler)))
    index, times = IndexBuilder(segment.base_offset, replica.config.index_interval_bytes).add_all(headers)
    temps = []
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        temp = os.path.join(replica.directory, segment_file_name(segment.base_offset, suffix)) + CLEANED_SUFFIX
        fd = open_nofollow(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            if suffix == LOG_SUFFIX:
                for lo, hi in ((0, start), (-1, -1), (end, size)):
                    if lo < 0:
                        _write_all(fd, middle_bytes)
                        continue
                    at = lo
                    while at < hi:
                        chunk = segment.read_bytes(at, min(SCAN_CHUNK_BYTES, hi - at))
                        if not chunk:
                            raise KlogError(f"{segment.log_path}: shrank while being copied")
                        _write_all(fd, chunk)
                        at += len(chunk)
                _write_all(fd, filler)
            else:
                _write_all(fd, index if suffix == INDEX_SUFFIX else times)
            os.fsync(fd)
        finally:
            os.close(fd)
        temps.append(temp)
    fsync_dir(replica.directory)
    return temps[0], temps[1], temps[2]


def _lost_markers(store: BrokerStore, replica: PartitionLog, segment: LogSegment, start: int, end: int,
                  plan: Discard, entries: list) -> list[bytes]:
    """The end-transaction markers the discarded bytes [start, end) of `segment` held, in offset order,
    for the transactions open at the damage (their first batch before it), each only where its
    outcome is proven to be that transaction's:
    - ABORT at the offset of a `.txnindex` entry of the producer that ends in the discarded range
      and begins where the open transaction does;
    - else the outcome the transaction coordinator completed for the producer id, when its record
      of the markers it wrote (TxnMetadata.ended) has one in this partition for a transaction
      beginning where the open one does, at that marker's offset.
    The producer id and epoch alone prove nothing: KIP-890 part 1 keeps the epoch across
    transactions, so the coordinator's last outcome can be a later transaction's (one whose
    records and marker here were discarded too, or that never wrote here), and committing an
    aborted transaction shows aborted records, aborting a committed one hides committed ones.
    A transaction neither proves and with no batch of its producer after the damage stays open, named
    in `plan.hanging` (`klog transactions abort --start-offset` ends it); one whose producer's later
    transaction here (the coordinator's record says it began after it) now ends it too is named in
    `plan.unknown`: its records take that transaction's outcome, which nothing proves is its own."""
    from klog.meta.transactions import COMPLETE_ABORT, COMPLETE_COMMIT, TransactionsMeta, tp_key
    from klog.store.txn import ABORT, COMMIT, DATA, TxnTracker, batch_event, control_batch, is_transactional
    from klog.store.walk import walk_batches

    def walk(seg: LogSegment, lo: int, hi: int) -> Iterator:
        try:
            for batch in walk_batches(seg.read_bytes, lo, hi, path=seg.log_path):
                yield seg, batch
        except CorruptLogError:
            return

    tracker, last, leader_epoch = TxnTracker(), {}, 0
    earlier = [replica.segments[b] for b in replica.bases if b < segment.base_offset]
    for seg, batch in itertools.chain(*(walk(e, 0, e.file_size()) for e in earlier), walk(segment, 0, start)):
        header = batch.header
        leader_epoch = header.leader_epoch  # (the last batch's before the damage: the markers' own)
        if not is_transactional(header.attributes):
            continue
        try:
            kind = batch_event(seg.read_bytes, batch.position, header, seg.log_path)
        except CorruptLogError:
            continue
        last[header.producer_id] = header
        if kind == DATA:
            tracker.data(header.producer_id, header.base_offset)
        elif kind is not None:
            tracker.marker(header.producer_id, header.base_offset, kind)
    at_damage = dict(tracker.open)  # producer id -> first offset of its transaction open at the damage
    after: dict[int, int | None] = {}  # producer id -> what its first batch after the damage is (DATA, a marker)
    later = [replica.segments[b] for b in replica.bases if b > segment.base_offset]
    for seg, batch in itertools.chain(walk(segment, end, segment.file_size()),
                                      *(walk(e, 0, e.file_size()) for e in later)):
        pid = batch.header.producer_id
        if pid in at_damage and pid not in after:
            try:
                after[pid] = batch_event(seg.read_bytes, batch.position, batch.header, seg.log_path)
            except CorruptLogError:
                after[pid] = None
    if not at_damage:
        return []
    lost = range(plan.damaged_from, plan.resume)
    coordinator = {m.producer_id: m for m in TransactionsMeta(store.meta).all()}
    key = tp_key((plan.topic, plan.partition))
    indexed = {(e.producer_id, e.first_offset): e.last_offset for e in entries if e.last_offset in lost}
    found: dict[int, tuple[int, int, int]] = {}  # offset -> (producer id, epoch, kind)
    for pid, first in sorted(at_damage.items()):
        meta = coordinator.get(pid)
        done = meta.ended.get(key) if meta is not None and meta.state in (COMPLETE_COMMIT, COMPLETE_ABORT) else None
        if indexed.get((pid, first)) is not None and indexed[(pid, first)] not in found:
            # its ABORT's .txnindex entry: the aborted range it closed begins where this transaction does
            found[indexed[(pid, first)]] = (pid, last[pid].producer_epoch, ABORT)
        elif done is not None and done[0] == first and done[1] in lost and done[1] not in found:
            # the coordinator's record of the marker it wrote here for the transaction beginning there (its
            # epoch then: a timed-out transaction's ABORT carries the fenced one)
            found[done[1]] = (pid, meta.producer_epoch, COMMIT if meta.state == COMPLETE_COMMIT else ABORT)
        elif pid not in after:  # nothing of its producer after the damage: left open
            if meta is None or (plan.topic, plan.partition) not in meta.tps():
                plan.hanging.append((pid, last[pid].producer_epoch, first))
            # (else the coordinator runs it here still: its marker comes when it ends)
        elif after[pid] is not None and done is not None and first < done[0] and done[0] >= plan.damaged_from:
            # the coordinator's last transaction here began after this one's first offset: this one's marker was
            # in the discarded range, and which way it went is not known; the next marker of its producer ends it
            # (the first batch after the damage is that transaction's data, or already its marker: its data were
            # discarded too)
            plan.unknown.append((pid, last[pid].producer_epoch, first))
    out = []
    for offset, (pid, epoch, kind) in sorted(found.items()):
        header = last[pid]
        marker = bytearray(control_batch(pid, epoch, kind, 0, header.max_timestamp, leader_epoch))
        marker[0:8] = offset.to_bytes(8, "big")  # (the base offset is outside the CRC)
        out.append(bytes(marker))
    return out


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
