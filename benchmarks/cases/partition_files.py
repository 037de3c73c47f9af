"""What a partition's files cost, whatever the code around them: the floor under `partitions`' keyed figure.

`klog produce t -K:` of N keyed lines into a topic of 1 and of 1,000 partitions (each written
twice first, then alternated rounds: the steady state of the `partitions` case); per partition
written beyond one, (CPU of 1,000 - CPU of 1) / (partitions written - 1). Beside it, in the same
rounds, the file operations that write makes per partition replayed from Python with no klog
logic at all (no objects, checks or formats: a list of os calls), over a copy of the same
store, in three layouts:

- `today`: klog's files as they are (the lock, the partition and replica state files, the active
  segment's `.log`, `.index` and `.timeindex`): the calls `strace` shows one write making, 29 per
  partition (6 opens and 6 closes, 2 flocks, 3 preads, 3 pwrites and 2 writes of state and index,
  1 of the batch, 4 stats, 2 lseeks) and one syncfs per 256 partitions;
- `one_state_file`: the lock and both state files merged into one file per partition (23 calls);
- `topic_slots`: one file per topic holding every partition's state in a slot of its own, each
  locked by an OFD byte-range lock (19 calls, 3 opens per partition).

A replay runs its partitions back to back, so the kernel finds their structures warmer than
klog's write does (which routes every record first): it is a floor, not an estimate. The
budget row is what 1.5x the CPU of one partition leaves per partition.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import shutil
import statistics
import struct
import time
from collections.abc import Callable

from cases.partitions import create, make_inputs, measured
from harness import Bench

F_OFD_SETLKW = getattr(fcntl, "F_OFD_SETLKW", 38)
SEGMENT = "00000000000000000000"
RW = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
NOATIME = getattr(os, "O_NOATIME", 0)
SLOT = 256  # bytes of one partition's state in the topic_slots layout
_libc = ctypes.CDLL(None, use_errno=True)


def _open_segment(folder: str) -> tuple[int, int, int]:
    log = os.open(f"{folder}/{SEGMENT}.log", RW | os.O_CREAT, 0o666)
    index = os.open(f"{folder}/{SEGMENT}.index", RW | os.O_CREAT | os.O_APPEND, 0o666)
    timeindex = os.open(f"{folder}/{SEGMENT}.timeindex", RW | os.O_CREAT | os.O_APPEND, 0o666)
    return log, index, timeindex


def _append(fds: tuple[int, int, int], batch: bytes) -> None:
    log, index, timeindex = fds
    size = os.fstat(log).st_size
    os.lseek(index, 0, os.SEEK_END)
    os.lseek(timeindex, 0, os.SEEK_END)
    os.pwrite(log, batch, size)
    os.write(index, b"\0" * 8)
    os.write(timeindex, b"\0" * 12)


def _segment_appended(store: str, p: int, batch: bytes) -> tuple[tuple[int, int, int], str]:
    folder = f"{store}/logs/t-{p}"
    os.lstat(folder)
    segment = _open_segment(folder)
    _append(segment, batch)
    return segment, folder


class Today:
    """klog's files as they are: lock, partition state, replica state, three segment files."""

    def __init__(self, store: str) -> None:
        self.store = store

    def open_append(self, p: int, batch: bytes) -> tuple:
        lock = os.open(f"{self.store}/locks/t-{p}.lock", RW | os.O_CREAT | NOATIME, 0o666)
        fcntl.flock(lock, fcntl.LOCK_EX)
        generation = os.pread(lock, 8, 0)
        os.fstat(lock)
        os.pwrite(lock, generation, 0)
        state = os.open(f"{self.store}/state/t-{p}.state", RW | os.O_CREAT | NOATIME, 0o666)
        fields = os.pread(state, 28, 0)
        folder = f"{self.store}/logs/t-{p}"
        os.lstat(folder)
        replica = os.open(f"{folder}/klog-replica.state", RW | os.O_CREAT | NOATIME, 0o666)
        record = os.pread(replica, 156, 0)
        segment = _open_segment(folder)
        _append(segment, batch)  # (the replica state file sits between the lstat and the opens)
        return lock, state, replica, segment, fields, record, folder

    def publish(self, held: tuple) -> None:
        lock, state, replica, segment, fields, record, _ = held
        os.pwrite(state, fields, 0)
        os.fstat(segment[0])
        os.pwrite(replica, record, 0)
        fcntl.flock(lock, fcntl.LOCK_UN)

    def close(self, held: tuple) -> None:
        lock, state, replica, segment, _, _, folder = held
        os.lstat(folder)
        os.pread(lock, 8, 0)
        for fd in (lock, *segment, replica, state):
            os.close(fd)


class OneStateFile(Today):
    """The lock and both state files as one file per partition."""

    def open_append(self, p: int, batch: bytes) -> tuple:
        lock = os.open(f"{self.store}/locks/t-{p}.lock", RW | os.O_CREAT | NOATIME, 0o666)
        fcntl.flock(lock, fcntl.LOCK_EX)
        states = os.pread(lock, 192, 0)
        os.fstat(lock)
        os.pwrite(lock, states[:8], 0)
        segment, folder = _segment_appended(self.store, p, batch)
        return lock, segment, states, folder

    def publish(self, held: tuple) -> None:
        lock, segment, states, _ = held
        os.fstat(segment[0])
        os.pwrite(lock, states, 0)
        fcntl.flock(lock, fcntl.LOCK_UN)

    def close(self, held: tuple) -> None:
        lock, segment, _, folder = held
        os.lstat(folder)
        os.pread(lock, 8, 0)
        for fd in (lock, *segment):
            os.close(fd)


class TopicSlots(Today):
    """One file per topic, a slot and an OFD byte-range lock per partition."""

    def __init__(self, store: str, partitions: int) -> None:
        super().__init__(store)
        self.slots = os.open(f"{store}/t.slots", RW | os.O_CREAT, 0o666)
        os.pwrite(self.slots, bytes(SLOT * partitions), 0)

    def _lock(self, p: int, kind: int) -> None:
        fcntl.fcntl(self.slots, F_OFD_SETLKW, struct.pack("hhqqi4x", kind, os.SEEK_SET, p * SLOT, SLOT, 0))

    def open_append(self, p: int, batch: bytes) -> tuple:
        self._lock(p, fcntl.F_WRLCK)
        states = os.pread(self.slots, 192, p * SLOT)
        os.pwrite(self.slots, states[:8], p * SLOT)
        segment, folder = _segment_appended(self.store, p, batch)
        return p, segment, states, folder

    def publish(self, held: tuple) -> None:
        p, segment, states, _ = held
        os.fstat(segment[0])
        os.pwrite(self.slots, states, p * SLOT)
        self._lock(p, fcntl.F_UNLCK)

    def close(self, held: tuple) -> None:
        _, segment, _, folder = held
        os.lstat(folder)
        for fd in segment:
            os.close(fd)


def replay(layout: Today, partitions: list[int], batch: bytes) -> float:
    """One write of `batch` into each of `partitions` as klog orders it (open and append each, one
    syncfs per 256, publish each, close each): CPU seconds of this process."""
    cpu = time.process_time()
    held = [layout.open_append(p, batch) for p in partitions]
    for start in range(0, len(held), 256):
        _libc.syncfs(_segment_of(held[start])[0])  # (any descriptor on the store's filesystem)
    for h in held:
        layout.publish(h)
    for h in held:
        layout.close(h)
    return time.process_time() - cpu


def _segment_of(held: tuple) -> tuple[int, int, int]:
    return next(x for x in held if isinstance(x, tuple))


def run(bench: Bench) -> None:
    lines = bench.size(200_000, 2_000)
    many = bench.size(1000, 10)
    _, keyed = make_inputs(bench.tmp, lines)
    env = bench.env
    stores = {p: os.path.join(bench.tmp, f"store-{p}") for p in (1, many)}
    for p, store in stores.items():
        create(env, store, "t", p)
        for _ in range(2):  # (the first write creates the files; the rounds measure the steady state)
            measured(["produce", "t", "-d", store, "-K:"], env, keyed, cwd=bench.tmp)
    written = sorted(int(name[2:]) for name in os.listdir(os.path.join(stores[many], "logs")) if name.startswith("t-"))
    batch = b"\0" * (os.path.getsize(keyed) // len(written))  # (the average batch klog wrote, ~22 KB)
    copy = os.path.join(bench.tmp, "replayed")
    shutil.copytree(stores[many], copy)  # (replays append junk: never into the store klog writes)
    layouts: dict[str, Today] = {"today": Today(copy), "one_state_file": OneStateFile(copy),
                                 "topic_slots": TopicSlots(copy, many)}

    def klog_write(p: int) -> Callable[[], float]:
        return lambda: measured(["produce", "t", "-d", stores[p], "-K:"], env, keyed, cwd=bench.tmp)[0]

    def replayed(layout: Today) -> Callable[[], float]:
        return lambda: (replay(layout, written, batch) - replay(layout, written[:1], batch))

    contenders = {"klog 1": klog_write(1), f"klog {many}": klog_write(many),
                  **{name: replayed(layout) for name, layout in layouts.items()}}
    rounds = bench.rounds(9)
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(contenders[name]())
    med = {name: statistics.median(v) for name, v in samples.items()}
    extra = len(written) - 1
    one = med["klog 1"]
    per_partition = (med[f"klog {many}"] - one) / extra * 1e6
    budget = 0.5 * one / extra * 1e6
    bench.row(f"klog produce t -K: of {lines:,} lines, per partition written beyond one ({len(written):,} vs 1, "
              f"median of {rounds})", f"{per_partition:.0f} us CPU ({med[f'klog {many}'] / one:.2f}x one partition's "
              f"{one:.2f} s)", f"1.5x one partition leaves {budget:.0f} us per partition")
    for name in layouts:
        bench.row(f"the same partitions' file operations alone, replayed: {name}",
                  f"{med[name] / extra * 1e6:.1f} us CPU per partition", f"{per_partition:.0f} us in klog's write")
