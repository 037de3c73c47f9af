"""Small fixed-size state files that processes share with pread/pwrite (no parsing, no lock).

- PartitionState (`<data dir>/state/<topic>-<partition>.state`): the high watermark, the log
  start offset and the leader epoch; readers look at it on every fetch, so it is 1 pread. A
  stem too long for a file name is shortened (names.partition_file_stem).
- ReplicaState (`<partition folder>/klog-replica.state`): where the writer left the replica
  (active segment, its valid size, log end, recovery point, max timestamp) and the boot it was
  written in. A writer that finds the file's size unchanged adopts it without a scan; a new
  boot id means a power cut may have lost unsynced bytes, so the tail is recovered.

Each record carries a CRC; a torn or foreign file reads as "unknown", which forces recovery.
"""

from __future__ import annotations

import errno
import functools
import operator
import os
import struct
import threading
import zlib
from collections.abc import Callable

from klog.store.names import fit_partition_file, open_nofollow
from klog.store.plain import Plain

_BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


@functools.cache  # a process lives within one boot; writers ask on every append
def current_boot_id() -> bytes:
    """16 bytes naming this boot of the machine (zeros where the OS does not say)."""
    try:
        with open(_BOOT_ID_PATH) as f:
            return bytes.fromhex(f.read().strip().replace("-", ""))[:16].ljust(16, b"\0")
    except (OSError, ValueError):
        return b"\0" * 16


class _StructFile:
    layout: struct.Struct  # fields, then a crc32 of them
    tail_size = 0  # bytes a newer version adds after them (read in the same pread; see ReplicaState)

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        self._writable = False
        # Readers in other threads pread the descriptor they found in self._fd without a lock: a
        # descriptor replaced by a writer's read-write one stays open until close() (closed at
        # once, its number could be reused by another open, and a reader would check a stranger's
        # bytes: a torn-looking file, "state lost"). _opening keeps two first opens from racing.
        # (a tuple, as a rule empty: no list allocated for each of the thousands of state files a
        # producer opens)
        self._replaced: tuple[int, ...] = ()
        self._opening = threading.Lock()
        # close() from another thread (a writer releasing an idle partition's files: the Python
        # API's producer) may close the descriptor a reader found between its look and its pread:
        # a read that sees this count move across its pread read nothing it can trust (EBADF, or
        # the bytes of whatever file got the number meanwhile: another partition's state) and
        # reads again. (A count, not a lock: two lock calls per read cost readers ~40%.)
        self._closes = 0

    def _open(self, write: bool) -> int | None:
        """The file, read-only until a write needs it: readers never create it (a read-only
        command changes nothing, and works on a read-only store). None: it does not exist."""
        with self._opening:
            fd = self._fd
            if fd is not None and (self._writable or not write):
                return fd
            flags = (os.O_RDWR | os.O_CREAT) if write else os.O_RDONLY
            try:
                # (the umask decides the mode: group-shared stores)
                new = open_nofollow(self.path, flags, noatime=True)
            except FileNotFoundError:
                if write:
                    raise
                return None
            if fd is not None:
                self._replaced += (fd,)  # (once per object: a read-write descriptor is never replaced)
            self._fd, self._writable = new, write
            return new

    def _open_existing_for_write(self) -> int | None:
        """The file read-write when it is there and may be written (its holder writes it next);
        None when it is missing, or read-only (a read-only store, a file not the user's): the
        caller opens it as a reader would. Nothing is created."""
        with self._opening:
            if self._fd is not None:
                return self._fd if self._writable else None
            try:
                new = open_nofollow(self.path, os.O_RDWR, noatime=True)
            except (FileNotFoundError, PermissionError):
                return None
            except OSError as e:
                if e.errno == errno.EROFS:
                    return None
                raise
            self._fd, self._writable = new, True
            return new

    def relink(self) -> None:
        """Close a descriptor kept open from before if its file was unlinked since (a topic
        deleted, and maybe created again, by another process): the next use opens the file now
        at the path. One fstat; none when nothing is open."""
        fd = self._fd
        if fd is None:
            return
        try:
            unlinked = os.fstat(fd).st_nlink == 0
        except OSError:
            unlinked = True  # (closed meanwhile by another thread: open it again)
        if unlinked:
            self.close()

    def close(self) -> None:
        with self._opening:
            self._closes += 1  # (before the descriptors go: see __init__)
            fd, replaced = self._fd, self._replaced
            self._fd, self._writable = None, False
            self._replaced = ()  # (as a rule none: a reader's descriptor, replaced by the writer's)
        for old in replaced:
            os.close(old)
        if fd is not None:
            os.close(fd)

    def read_fields(self, write_next: bool = False, may_write: bool = False, relink: bool = False) -> tuple | None:
        """The fields, or None if the file is missing, short or fails its CRC. write_next: the
        caller writes the file next (a writer's open), so it is opened for writing at once (a
        missing one is created empty, which reads as missing): one open, not a read-only one
        then a read-write one. may_write: the caller may write it later (its lock's holder), so
        a first open is read-write where the file is there and writable (nothing is created).
        relink: a descriptor kept open from before is first checked for its file having been
        unlinked since (a topic deleted, and maybe created again, by another process): then
        the file now at the path is read (one fstat; none when nothing is open yet)."""
        data = self.read_data(write_next, may_write, relink)
        return self._fields_of(data) if data is not None else None

    def read_data(self, write_next: bool = False, may_write: bool = False, relink: bool = False) -> bytes | None:
        """The file's bytes as read_fields reads them (the fields, their CRC and tail_size more),
        or None if the file is missing."""
        if relink and self._fd is not None:  # (nothing open: nothing to check)
            self.relink()
        closes = self._closes
        fd = self._fd
        if fd is None or (write_next and not self._writable):  # (a reader's every read: no call)
            fd = self._open_existing_for_write() if may_write and fd is None and not write_next else None
            if fd is None:
                fd = self._open(write=write_next)
            if fd is None:
                return None
        try:
            data = os.pread(fd, self.layout.size + 4 + self.tail_size, 0)
        except OSError:
            if self._closes == closes:
                raise
            return self.read_data(write_next)  # closed under the pread by another thread: again
        if self._closes != closes:
            return self.read_data(write_next)  # maybe another file's bytes (see __init__): again
        return data

    def _fields_of(self, data: bytes | bytearray) -> tuple | None:
        """The fields of the file's bytes as read, or None if they are short or fail their CRC
        (what a newer version added after them is not looked at: see ReplicaState)."""
        layout = self.layout
        n = layout.size + 4
        if len(data) != n and (len(data) < n or not self.tail_size):
            return None
        # (a slice and a struct read: a memoryview and its two slices cost ~0.3 us more, twice per open)
        if zlib.crc32(data[:n - 4]) != _CRC.unpack_from(data, n - 4)[0]:
            return None
        return layout.unpack_from(data)

    def read_fields_nowait(self) -> tuple | None:
        """The fields through the descriptor this process has open, read with RWF_NOWAIT (an event
        loop's read: the page cache or nothing): None when none is open, when it is closed under
        the read, or when the bytes are short or fail their CRC (the caller then reads in a thread,
        as read_fields does). The read's OSError (EAGAIN: not cached) is the caller's."""
        fd = self._fd
        if fd is None:
            return None
        closes = self._closes
        buf = bytearray(self.layout.size + 4)
        n = os.preadv(fd, (buf,), 0, os.RWF_NOWAIT)
        if self._closes != closes or n != len(buf):
            return None  # (closed under the read: maybe another file's bytes; or short)
        return self._fields_of(buf)

    def _write_bytes(self, data: bytes | bytearray, sync: bool) -> None:
        """The whole file's bytes, written in place from its start (and fsynced when `sync`)."""
        # (the descriptor open for writing, as _open would return it, without its lock: the
        # writer holds the partition's lock, and a close by another thread waits for that)
        fd = self._fd if self._writable else None
        if fd is None:
            fd = self._open(write=True)
        assert fd is not None
        if os.pwrite(fd, data, 0) != len(data):
            raise OSError(f"short write to {self.path}")
        if sync:
            os.fsync(fd)


class ReplicaSnapshot(Plain):
    _fields = ("boot_id", "active_base", "valid_size", "log_end_offset", "recovery_point", "max_timestamp",
               "offset_of_max_timestamp")

    def __init__(self, boot_id: bytes, active_base: int, valid_size: int, log_end_offset: int, recovery_point: int,
                 max_timestamp: int, offset_of_max_timestamp: int, trust: ReplicaTrust | None = None) -> None:
        self.boot_id = boot_id
        self.active_base = active_base
        self.valid_size = valid_size
        self.log_end_offset = log_end_offset
        self.recovery_point = recovery_point
        self.max_timestamp = max_timestamp
        self.offset_of_max_timestamp = offset_of_max_timestamp
        self.trust = trust  # what a writer recorded to be trusted by the next one (None: nothing)


class ReplicaTrust(tuple):
    """What the last writer saw of the files a snapshot describes, so that the next writer's open
    can adopt the log without reading it again (PartitionLog.open_for_write): the folder (its
    inode and change time, which any file created, renamed or removed in it moves), the active
    segment's `.log` (inode, change time; the snapshot has its size) and its two indexes (sizes), and
    the writer state a read of them would give (the bytes after the last offset-index entry, the
    time index's last timestamp, the first batch's max timestamp). The next writer compares them
    with the lstat it makes of the folder and a look (fstat, lseek) at each descriptor it opens anyway; any
    difference, and it checks the log as before. A writer records the folder only when it knew
    its names (listed in its hold, or trusted so) and saw nothing a full open would act on."""

    __slots__ = ()
    _fields = ("folder_ino", "folder_changed_ns", "log_ino", "log_changed_ns", "index_bytes", "time_index_bytes",
               "since_last", "last_time_ts", "first_batch_max_timestamp", "checkpoints_digest", "flags")
    FIRST_BATCH_KNOWN = 1  # first_batch_max_timestamp is the first batch's (else read it when needed)
    STRICT_RECORDS = 2  # the folder holds log.STRICT_RECORDS_MARKER
    CHECKPOINTS_KNOWN = 4  # checkpoints_digest names what the Kafka checkpoint files in the folder hold
    CLEANED = 8  # the folder holds log.CLEANED_MARKER

    # (a tuple: a record is read at every first open of a partition, and built at every state write;
    # a class setting eleven attributes cost ~2 us each time)
    def __new__(cls, folder_ino: int, folder_changed_ns: int, log_ino: int, log_changed_ns: int, index_bytes: int,
                time_index_bytes: int, since_last: int, last_time_ts: int, first_batch_max_timestamp: int,
                checkpoints_digest: int, flags: int) -> ReplicaTrust:
        return tuple.__new__(cls, (folder_ino, folder_changed_ns, log_ino, log_changed_ns, index_bytes,
                                   time_index_bytes, since_last, last_time_ts, first_batch_max_timestamp,
                                   checkpoints_digest, flags))

    def __repr__(self) -> str:
        return f"ReplicaTrust({', '.join(f'{n}={v!r}' for n, v in zip(self._fields, self, strict=True))})"

    folder_ino = property(operator.itemgetter(0))
    folder_changed_ns = property(operator.itemgetter(1))
    log_ino = property(operator.itemgetter(2))
    log_changed_ns = property(operator.itemgetter(3))
    index_bytes = property(operator.itemgetter(4))
    time_index_bytes = property(operator.itemgetter(5))
    since_last = property(operator.itemgetter(6))
    last_time_ts = property(operator.itemgetter(7))
    first_batch_max_timestamp = property(operator.itemgetter(8))
    checkpoints_digest = property(operator.itemgetter(9))
    flags = property(operator.itemgetter(10))


class ReplicaState(_StructFile):
    """Version 1 (what every klog reads): the snapshot's fields and their CRC, 68 bytes. Version 2
    adds a ReplicaTrust after them, tagged and with a CRC over both parts: older code reads the
    first 68 bytes as ever (and writing only those leaves a tail whose CRC no longer matches:
    ignored), newer code reads both in one pread."""

    FILE_NAME = "klog-replica.state"
    layout = struct.Struct(">16sqqqqqq")
    TRUST_TAG = b"KRT2"
    trust_layout = struct.Struct(">4sQqQqqqqqqII")
    tail_size = trust_layout.size + 4

    def read(self, write_next: bool = False) -> ReplicaSnapshot | None:
        data = self.read_data(write_next)
        if data is None:
            return None
        fields = self._fields_of(data)
        if not fields:
            return None
        # the trust record after them (its check inline: read at every first open of a partition)
        start = self.layout.size + 4
        end = start + self.trust_layout.size
        trust = None
        if (len(data) == end + 4 and data[start:start + 4] == self.TRUST_TAG
                and zlib.crc32(data[:end]) == _CRC.unpack_from(data, end)[0]):
            trust = tuple.__new__(ReplicaTrust, self.trust_layout.unpack_from(data, start)[1:])
        return ReplicaSnapshot(*fields, trust)

    def write(self, snap: ReplicaSnapshot, sync: bool = False) -> None:
        trust = snap.trust
        # (packed and joined: ~0.4 us less than packing into a bytearray through a memoryview)
        body = self.layout.pack(*_replica_values(snap))
        head = (body + _CRC.pack(zlib.crc32(body))
                + self.trust_layout.pack(self.TRUST_TAG, *(trust if trust is not None else _NO_TRUST)))
        self._write_bytes(head + _CRC.pack(zlib.crc32(head)), sync)


_CRC = struct.Struct(">I")
# a snapshot's fields in order, one C-level call (dataclasses.astuple deep-copies each one: 3x
# slower per append; a getattr per field cost a Python step each)
_replica_values = operator.attrgetter(*ReplicaSnapshot._fields)
# a record that trusts nothing (folder inode 0: no folder has it), written when a writer knows too
# little: its tail must not keep an older writer's trust
_NO_TRUST = ReplicaTrust(0, 0, 0, 0, -1, -1, 0, -1, -1, 0, 0)


class PartitionSnapshot(Plain):
    _fields = ("high_watermark", "log_start_offset", "leader_epoch")

    def __init__(self, high_watermark: int, log_start_offset: int, leader_epoch: int) -> None:
        self.high_watermark = high_watermark
        self.log_start_offset = log_start_offset
        self.leader_epoch = leader_epoch


class PartitionState(_StructFile):
    layout = struct.Struct(">qqq")
    SUFFIX = ".state"

    def __init__(self, path: str, fitted: bool = False) -> None:
        """`path` is `<state dir>/<topic>-<partition>.state`; a name too long for the file system
        becomes its short form (names.fit_partition_file; fitted: the caller found it fits)."""
        # (no super() object: once per partition a producer opens)
        _StructFile.__init__(self, path if fitted else fit_partition_file(path, self.SUFFIX))
        if self.path != path:
            _adopt_legacy(path, self.path)
        # While the calling thread holds the partition's lock (`held()`: the lock's generation,
        # else None) nobody else writes the file (other processes and threads wait for the lock),
        # so what that thread last read or wrote in the hold is served from memory (an append read
        # it three times). Other threads (a server's readers) read the file and leave this alone.
        self.held: Callable[[], tuple[int, int] | None] = _not_held
        self._known: tuple[tuple[int, int], tuple] | None = None  # (lock generation, fields)

    def read(self) -> PartitionSnapshot:
        """The state, or zeros if the file is missing or damaged (writers rebuild it: see
        Partition.open_for_write; readers use read_valid and say when it is lost)."""
        fields = self.read_valid_fields()  # (read_valid's, without its call: a writer's reconcile asks)
        return PartitionSnapshot(*fields) if fields else PartitionSnapshot(0, 0, 0)

    def read_valid(self) -> PartitionSnapshot | None:
        fields = self.read_valid_fields()
        return PartitionSnapshot(*fields) if fields else None

    def read_valid_fields(self) -> tuple | None:
        """read_valid()'s fields (high watermark, log start offset, leader epoch), no snapshot
        built (an append asks three times)."""
        generation = self.held()
        if generation is None:
            return self.read_fields() or None
        known = self._known
        if known is not None and known[0] == generation:
            return known[1]
        # (the holder writes it next, as a rule; read_fields' work, without its call)
        data = self.read_data(may_write=True, relink=True)
        fields = self._fields_of(data) if data is not None else None
        self._known = (generation, fields) if fields else None
        return fields or None

    def leader_epoch(self) -> int:
        """read().leader_epoch, without a snapshot built when the holder knows the file (every append)."""
        known = self._known
        if known is not None and known[0] == self.held():
            return known[1][2]
        return self.read().leader_epoch

    def known_fields(self) -> tuple | None:
        """The fields the calling thread's hold of the lock last read or wrote (None: not held,
        or not known)."""
        known = self._known
        return known[1] if known is not None and known[0] == self.held() else None

    def known_at(self, generation: tuple[int, int]) -> tuple | None:
        """The state's fields as the hold `generation` of the lock last read or wrote them, if known."""
        known = self._known
        return known[1] if known is not None and known[0] == generation else None

    def carry(self, previous: tuple[int, int], generation: tuple[int, int]) -> None:
        """The lock passed from hold `previous` straight to `generation` (no other holder in
        between): what was known in the one is still the file's content in the other."""
        known = self._known
        if known is not None and known[0] == previous:
            self._known = (generation, known[1])

    def write(self, snap: PartitionSnapshot, sync: bool = False) -> None:
        self.write_values(_partition_values(snap), sync)

    def write_values(self, values: tuple, sync: bool = False) -> None:
        """write() of a snapshot's fields, in order."""
        self._known = None  # a failed write leaves the file unknown
        body = self.layout.pack(*values)
        self._write_bytes(body + zlib.crc32(body).to_bytes(4, "big"), sync)
        generation = self.held()
        if generation is not None:
            self._known = (generation, values)

    def close(self) -> None:
        self._known = None
        _StructFile.close(self)  # (no super() object: once per partition a producer closes)


_partition_values = operator.attrgetter(*PartitionSnapshot._fields)  # (see _replica_values)


def _not_held() -> None:
    return None


def _adopt_legacy(old: str, new: str) -> None:
    """Stores written before names were shortened may hold the state under its full name (it fit
    on its own, only its longer siblings did not): move it to the short name once."""
    try:
        if not os.path.exists(new):
            os.rename(old, new)
    except OSError:  # no such file (the usual case), a name too long to exist, or a racing process
        pass
