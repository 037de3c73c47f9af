"""read_committed's walk, saved: the state StableView reached (open transactions, aborted ranges),
so that the next process walks only the batches that follow, not every batch header of the
partition (Kafka's producer-state snapshots play this part for its ProducerStateManager).

One file per partition in the data directory's state/ (`<topic>-<partition>.txnview`, beside the
`.state` file; never in the log folder, where a new name would make every writer's open list the
folder again, and which may be handed to Kafka). Written by readers only (a refresh that walked
SAVE_AFTER_OFFSETS offsets past the saved walk), atomically (a temporary file renamed over it),
never fsynced: it is never required. It is taken only when every file it covers is provably the
file the walk read: the replica folder (path, inode); each sealed segment walked whole, its `.log`
(inode, size, change time: a change time settled before the refresh that walked it, so the file was
not written since) and its `.txnindex` (present or not; inode, size, change time); the segment the
walk was in (inode, at least the size walked, and the last batch walked still where it was: base
offset, CRC). Anything else, a segment added among them, a cleaner's swap, a truncation, a damaged,
short or foreign file, another format, and the view walks everything as before (and saves again).
Segments it covers that retention deleted from the front are pruned, as the view prunes them.

Format (version 1, big-endian): b"KTXV", version u16, CRC32 of what follows u32, then the length
u32 of a JSON document (folder, its inode, the offset the walk reached, the open transactions, the
segments), then the aborted ranges as `.txnindex` entries (34 bytes each)."""

from __future__ import annotations

import json
import os
import struct
import zlib
from bisect import bisect_right

from klog.errors import SymlinkError
from klog.store.format import LOG_SUFFIX, TXN_INDEX_SUFFIX, segment_file_name
from klog.store.names import join_name, open_nofollow

FILE_SUFFIX = ".txnview"
TMP_SUFFIX = ".txnview.tmp"
MAGIC = b"KTXV"
VERSION = 1
_HEAD = struct.Struct(">4sHII")  # magic, version, crc of the rest, json length
FILE_BYTES_MAX = 256 << 20  # a larger file is no cache klog wrote: not read


class Saved:
    """What a cache file holds, checked against the folder as it is (load)."""

    __slots__ = ("next_offset", "open", "aborted", "segments", "last")

    def __init__(self, next_offset: int, open_txns: dict[int, int], aborted: list, segments: dict[int, tuple[int, int]],
                 last: tuple[int, int, int]) -> None:
        self.next_offset = next_offset  # the offset after the last batch walked
        self.open = open_txns  # producer id -> first offset of its open transaction
        self.aborted = aborted  # AbortedTxn
        self.segments = segments  # base -> (inode, size) of the covered segments still there
        self.last = last  # (base, inode, size) of the last covered segment: the walk resumes at its end


def _file_key(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_size, st.st_ctime_ns]


def encode(folder: str, folder_ino: int, next_offset: int, open_txns: dict[int, int], aborted: list,
           segments: list[list], last: list[int]) -> bytes:
    """segments: [base, [ino, size, ctime], [ino, size, ctime] of its .txnindex or None] of the
    sealed segments walked whole, in order; last: the segment the walk is in (base, inode, position
    reached, and the position, base offset and CRC of the last batch it walked there)."""
    doc = json.dumps({"folder": folder, "folder_ino": folder_ino, "next_offset": next_offset,
                      "open": sorted(open_txns.items()), "segments": segments, "last": last},
                     separators=(",", ":")).encode()
    body = struct.pack(">I", len(doc)) + doc + b"".join(a.pack() for a in aborted)
    return _HEAD.pack(MAGIC, VERSION, zlib.crc32(body), 0)[:-4] + body


def decode(data: bytes) -> dict | None:
    """The document and aborted ranges of a cache file's bytes, or None (not one this klog wrote whole)."""
    from klog.store.txn import ABORTED_TXN, AbortedTxn

    if len(data) < _HEAD.size:
        return None
    magic, version, crc, doc_len = _HEAD.unpack_from(data)
    if magic != MAGIC or version != VERSION or zlib.crc32(memoryview(data)[_HEAD.size - 4:]) != crc:
        return None
    end = _HEAD.size + doc_len
    rest = len(data) - end
    if rest < 0 or rest % ABORTED_TXN.size:
        return None
    try:
        doc = json.loads(data[_HEAD.size:end])
        doc["folder"] + "", int(doc["folder_ino"]), int(doc["next_offset"])  # noqa: B018 - type checks
        doc["open"] = {int(p): int(f) for p, f in doc["open"]}
        doc["segments"] = [(int(b), [int(x) for x in log], None if idx is None else [int(x) for x in idx])
                           for b, log, idx in doc["segments"]]
        doc["last"] = [int(x) for x in doc["last"]]
        if len(doc["last"]) != 6:
            return None
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    aborted = []
    for version_, pid, first, last, lso in ABORTED_TXN.iter_unpack(memoryview(data)[end:]):
        if version_ != 0:
            return None
        aborted.append(AbortedTxn(pid, first, last, lso))
    doc["aborted"] = aborted
    return doc


def _read(path: str) -> bytes | None:
    try:
        fd = open_nofollow(path, os.O_RDONLY | os.O_NONBLOCK)
    except (OSError, SymlinkError):  # (a link planted there: not followed, and not needed)
        return None
    try:
        st = os.fstat(fd)
        if not (st.st_mode & 0o170000 == 0o100000) or st.st_size > FILE_BYTES_MAX:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    except OSError:
        return None
    finally:
        os.close(fd)


def load(path: str, replica, bases: list[int], bound: int) -> Saved | None:  # noqa: ANN001 - PartitionLog
    """The saved walk of `replica` if every segment it covers is the file it was (see the module's
    docstring), and it walked nothing at or past `bound`; else None."""
    data = _read(path)
    if data is None:
        return None
    doc = decode(data)
    if doc is None or doc["folder"] != replica.directory or doc["next_offset"] > bound or not bases:
        return None
    try:
        if os.lstat(replica.directory).st_ino != doc["folder_ino"]:
            return None
    except OSError:
        return None
    last_base, last_ino, position, batch_at, batch_offset, batch_crc = doc["last"]
    kept = [s for s in doc["segments"] if s[0] >= bases[0]]
    # the segments there are now, up to the one the walk was in, are the ones it walked (none
    # added, none merged), retention aside
    if bases[:bisect_right(bases, last_base)] != [*(s[0] for s in kept), last_base]:
        return None
    segments = replica.segments
    directory = replica.directory
    try:
        with_index = {n for n in os.listdir(directory) if n.endswith(TXN_INDEX_SUFFIX)} if kept else set()
    except OSError:
        return None
    walked = {}
    for base, log_key, index_key in kept:
        try:
            if _file_key(os.lstat(segments[base].log_path)) != log_key:
                return None
        except OSError:
            return None
        name = segment_file_name(base, TXN_INDEX_SUFFIX)
        if index_key is None:
            if name in with_index:
                return None
        else:
            try:
                if name not in with_index or _file_key(os.lstat(join_name(directory, name))) != index_key:
                    return None
            except OSError:
                return None
        walked[base] = (log_key[0], log_key[1])
    if not _same_batch(segments[last_base], last_ino, position, batch_at, batch_offset, batch_crc):
        return None
    return Saved(doc["next_offset"], doc["open"], doc["aborted"], walked, (last_base, last_ino, position))


def _same_batch(segment, inode: int, position: int, batch_at: int, base_offset: int, crc: int) -> bool:  # noqa: ANN001
    """Is the segment the walk was in the same file, at least `position` bytes long, with the batch
    it walked last still at `batch_at` (its base offset and CRC: a truncation and new appends over
    the same bytes put another batch there)? Its size alone cannot tell: it may be the active one."""
    from klog.store.codec import read_header
    from klog.store.format import RECORD_BATCH_OVERHEAD

    try:
        opened, size = segment.pin()
    except OSError:
        return False
    try:
        if segment._log_inode != inode or size < position:
            return False
        data = opened.read(batch_at, RECORD_BATCH_OVERHEAD)
        if len(data) < RECORD_BATCH_OVERHEAD:
            return False
        header = read_header(data, 0)
        return header.base_offset == base_offset and header.crc == crc and batch_at + header.size == position
    except (OSError, ValueError, struct.error):
        return False
    finally:
        opened.release()


def save(path: str, replica, walked: list[tuple[int, int, int, int, int]], last: tuple,  # noqa: ANN001
         next_offset: int, open_txns: dict[int, int], aborted: list) -> bool:
    """Write the cache for the view's state at the end of the last of `walked` (base, inode, size
    as the walk read them, when the refresh that finished walking it began, when the refresh that
    read its .txnindex began; in order from the front), if each of those files is provably as the
    walk read it: the same inode and size, and last changed (settled) before that refresh began.
    True if written. Any OSError: not written."""
    from klog.store.log import _settled

    directory = replica.directory
    try:
        folder_ino = os.lstat(directory).st_ino
        with_index = {n for n in os.listdir(directory) if n.endswith(TXN_INDEX_SUFFIX)}
        segments = []
        for base, ino, size, finished, entered in walked:
            st = os.lstat(join_name(directory, segment_file_name(base, LOG_SUFFIX)))
            if st.st_ino != ino or st.st_size != size or not _settled(st.st_ctime_ns, finished):
                return False
            index = None
            name = segment_file_name(base, TXN_INDEX_SUFFIX)
            if name in with_index:
                ist = os.lstat(join_name(directory, name))
                if not _settled(ist.st_ctime_ns, entered):
                    return False
                index = _file_key(ist)
            segments.append([base, _file_key(st), index])
        data = encode(directory, folder_ino, next_offset, open_txns, aborted, segments, list(last))
        tmp = path.removesuffix(FILE_SUFFIX) + TMP_SUFFIX
        fd = open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            written = os.write(fd, data)
        finally:
            os.close(fd)
        if written != len(data):
            return False
        os.replace(tmp, path)  # (over a link planted at `path`: the link goes, never what it points to)
    except (OSError, SymlinkError):
        return False
    return True
