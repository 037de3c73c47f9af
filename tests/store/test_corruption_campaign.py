"""A seeded corruption campaign against the readers: a store with a plain, a compressed and a
transactional topic (one aborted transaction), then one file at a time damaged (bytes of a batch's
header, records or CRC flipped, a segment cut or zero-filled or grown by garbage, an index or time
index garbled, cut, reordered or pointing past the log, a state, replica-state, leader-epoch or
.txnindex file garbled, the metadata database cut) and every reader run on it: `consume` from the
start, `--since`, `-o`, `--tail` and read_committed, `verify`, `dump`, `offsets`, `topics describe`.

What must hold (docs/durability.md): no traceback or signal, an exit status of 0, 1 or 2, at most one
line on stderr for a failure, and a consume that exits 0 prints exactly what it printed before the
damage (never a silent short read: a record is printed, or the read fails and says so).

Each command runs in a forked child of this process (klog imported once: ~20 ms a command instead
of a new interpreter's ~0.6 s). The normal lane runs every kind of damage twice; the slow one runs
a few hundred seeded ones."""

from __future__ import annotations

import glob
import os
import random
import shutil
import struct
import sys
import tempfile
import traceback
from collections.abc import Callable

import pytest

import klog

TOPICS = ("plain", "gzip", "txn")


def _run(data_dir: str, *args: str, stdin: bytes = b"") -> tuple[int, bytes, str]:
    """`klog ARGS` in a forked child: (exit status, or -signal; stdout; stderr)."""
    from klog.cli.app import run

    files = [tempfile.TemporaryFile() for _ in range(3)]
    files[0].write(stdin)
    files[0].seek(0)
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 99
        try:
            for fd, f in enumerate(files):
                os.dup2(f.fileno(), fd)
            sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the child's, until os._exit
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
            code = int(run(["--data-dir", data_dir, *args]))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:  # noqa: BLE001 - the finding itself
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    out, err = files[1], files[2]
    out.seek(0)
    err.seek(0)
    return os.waitstatus_to_exitcode(status), out.read(), err.read().decode("utf-8", "replace")


def _build(data_dir: str) -> None:
    def ok(*args: str, stdin: bytes = b"") -> None:
        code, _, err = _run(data_dir, *args, stdin=stdin)
        assert code == 0, (args, err)

    ok("topics", "create", "plain", "-c", "segment.bytes=1200")
    ok("topics", "create", "gzip", "-c", "segment.bytes=1500")
    ok("topics", "create", "txn", "-c", "segment.bytes=1500")
    for i in range(5):
        ok("produce", "plain", stdin=b"".join(b"plain-%d-%d\n" % (i, j) for j in range(12)))
        ok("produce", "gzip", "-z", "gzip", stdin=b"".join(b"gzip-%d-%d\n" % (i, j) for j in range(20)))
    with klog.open(data_dir) as store, store.producer(transactional_id="etl") as producer:
        for i in range(6):
            producer.begin()
            for j in range(6):
                producer.send("txn", b"txn-%d-%d" % (i, j), partition=0)
            producer.flush()  # (an aborted transaction's records reach the log)
            producer.commit() if i != 2 else producer.abort()


def _readers(topic: str) -> list[tuple[str, ...]]:
    return [("consume", topic), ("consume", topic, "--since", "0"), ("consume", topic, "-o", "20"),
            ("consume", topic, "--tail", "7"), ("consume", topic, "-X", "isolation.level=read_committed"),
            ("verify", topic), ("dump", f"{topic}-0"), ("offsets", topic), ("topics", "describe", topic)]


# -- damage: each takes (data dir, topic, rng) and returns what it did -----------------------------

def _folder(data_dir: str, topic: str) -> str:
    return os.path.join(data_dir, "logs", f"{topic}-0")


def _segment(data_dir: str, topic: str, rng: random.Random) -> str:
    return rng.choice(sorted(glob.glob(os.path.join(_folder(data_dir, topic), "*.log"))))


def _batches(path: str) -> list[tuple[int, int]]:
    with open(path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while pos + 12 <= len(data):
        length = struct.unpack_from(">i", data, pos + 8)[0]
        if length <= 0:
            break
        out.append((pos, length + 12))
        pos += length + 12
    return out


# a v2 batch header's fields: (offset, size); "records" is the rest
_FIELDS = {"baseOffset": (0, 8), "batchLength": (8, 4), "magic": (16, 1), "crc": (17, 4), "attributes": (21, 2),
           "lastOffsetDelta": (23, 4), "maxTimestamp": (35, 8), "producerId": (43, 8), "recordCount": (57, 4),
           "records": (61, 0)}


def _rewrite(path: str, change: Callable[[bytearray], bytearray]) -> None:
    with open(path, "rb") as f:
        data = bytearray(f.read())
    with open(path, "wb") as f:
        f.write(change(data))


def flip_batch_field(data_dir: str, topic: str, rng: random.Random) -> str:
    path = _segment(data_dir, topic, rng)
    pos, size = rng.choice(_batches(path))
    field = rng.choice(list(_FIELDS))
    at, width = _FIELDS[field]
    at = pos + at + rng.randrange(width or size - 61)

    def flip(data: bytearray) -> bytearray:
        data[at] ^= 1 << rng.randrange(8)
        return data

    _rewrite(path, flip)
    return f"flipped a bit of {field} at {at} of {path}"


def cut_segment(data_dir: str, topic: str, rng: random.Random) -> str:
    path = _segment(data_dir, topic, rng)
    at = rng.randrange(os.path.getsize(path))
    os.truncate(path, at)
    return f"cut {path} at {at}"


def zero_fill(data_dir: str, topic: str, rng: random.Random) -> str:
    path = _segment(data_dir, topic, rng)
    size = os.path.getsize(path)
    at, length = rng.randrange(size), rng.randrange(1, 300)

    def zero(data: bytearray) -> bytearray:
        data[at:at + length] = bytes(len(data[at:at + length]))
        return data

    _rewrite(path, zero)
    return f"zero-filled {path}[{at}:{at + length}]"


def append_garbage(data_dir: str, topic: str, rng: random.Random) -> str:
    path = _segment(data_dir, topic, rng)
    _rewrite(path, lambda data: data + rng.randbytes(rng.randrange(1, 200)))
    return f"garbage after {path}"


def garble_index(data_dir: str, topic: str, rng: random.Random) -> str:
    log = _segment(data_dir, topic, rng)
    suffix, entry = rng.choice([(".index", 8), (".timeindex", 12)])
    path = log[:-4] + suffix
    how = rng.choice(["garbage", "odd size", "swapped", "past the log", "cut", "deleted"])
    if how == "deleted":
        os.unlink(path)
        return f"deleted {path}"

    def change(data: bytearray) -> bytearray:
        n = len(data) // entry
        if how == "garbage":
            return bytearray(rng.randbytes(max(len(data), entry)))
        if how == "odd size":
            return data + rng.randbytes(rng.randrange(1, entry))
        if how == "swapped" and n >= 2:
            i = rng.randrange(n - 1) * entry
            data[i:i + 2 * entry] = data[i + entry:i + 2 * entry] + data[i:i + entry]
        elif how == "past the log" and n:
            i = rng.randrange(n) * entry
            if suffix == ".index":
                data[i + 4:i + 8] = struct.pack(">i", os.path.getsize(log) + rng.randrange(1, 10**6))
            else:
                data[i + 8:i + 12] = struct.pack(">i", 2**31 - 1)
        elif how == "cut":
            return data[:rng.randrange(len(data) + 1)]
        return data

    _rewrite(path, change)
    return f"{how} {path}"


def garble_side_file(data_dir: str, topic: str, rng: random.Random) -> str:
    candidates = [os.path.join(data_dir, "state", f"{topic}-0.state"),
                  *glob.glob(os.path.join(_folder(data_dir, topic), "klog-replica.state")),
                  *glob.glob(os.path.join(_folder(data_dir, topic), "leader-epoch-checkpoint")),
                  *glob.glob(os.path.join(_folder(data_dir, topic), "*.txnindex"))]
    path = rng.choice([p for p in candidates if os.path.exists(p)])
    how = rng.choice(["flip", "cut", "garbage"])

    def change(data: bytearray) -> bytearray:
        if how == "flip" and data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif how == "cut":
            return data[:rng.randrange(len(data) + 1)]
        elif how == "garbage":
            return bytearray(rng.randbytes(len(data) or 20))
        return data

    _rewrite(path, change)
    return f"{how} {path}"


def cut_metadata(data_dir: str, topic: str, rng: random.Random) -> str:
    """LMDB's file is only ever cut (a copy that stopped early), never edited by hand."""
    path = os.path.join(data_dir, "meta", "data.mdb")
    at = rng.choice([rng.randrange(os.path.getsize(path)), 4096 * rng.randrange(1, os.path.getsize(path) // 4096)])
    os.truncate(path, at)
    return f"cut {path} at {at}"


DAMAGE = [flip_batch_field, cut_segment, zero_fill, append_garbage, garble_index, garble_side_file, cut_metadata]


def _problems(args: tuple[str, ...], got: tuple[int, bytes, str], before: bytes) -> list[str]:
    code, out, err = got
    found = []
    if code not in (0, 1, 2):
        found.append(f"exit status {code}")
    if "Traceback" in err:
        found.append("a traceback")
    if code != 0 and len(err.strip().splitlines()) > 1:
        found.append(f"{len(err.strip().splitlines())} lines on stderr")
    if args[0] == "consume" and code == 0 and out != before:
        found.append(f"a silent short read: {len(out.splitlines())} of {len(before.splitlines())} lines, exit 0")
    return found


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> tuple[str, dict[tuple[str, ...], bytes]]:
    """The store and what every reader prints of it undamaged."""
    data_dir = str(tmp_path_factory.mktemp("campaign") / "pristine")
    _build(data_dir)
    before = {}
    for topic in TOPICS:
        for args in _readers(topic):
            code, out, err = _run(data_dir, *args)
            assert code == 0, (args, err)
            before[args] = out
    return data_dir, before


def campaign(pristine, tmp_path, seed: int, rounds: int) -> None:  # noqa: ANN001 - the fixture's pair
    """`rounds` rounds over every kind of damage, seeded; fails listing every finding."""
    source, before = pristine
    rng = random.Random(seed)
    findings = []
    for n in range(rounds * len(DAMAGE)):
        damage = DAMAGE[n % len(DAMAGE)]
        topic = rng.choice(TOPICS)
        data_dir = str(tmp_path / f"d{n}")
        shutil.copytree(source, data_dir, symlinks=True)
        what = damage(data_dir, topic, rng)
        for args in _readers(topic):
            got = _run(data_dir, *args)
            findings += [f"{what}: klog {' '.join(args)}: {p} ({got[2].strip()[-300:]!r})"
                         for p in _problems(args, got, before[args])]
        shutil.rmtree(data_dir)
    assert not findings, f"seed {seed}:\n" + "\n".join(findings)


@pytest.mark.slow
def test_every_kind_of_damage_twice(pristine, tmp_path):
    campaign(pristine, tmp_path, seed=20261128, rounds=2)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_longer_seeded_campaign(pristine, tmp_path, seed):
    campaign(pristine, tmp_path, seed=seed, rounds=8)  # (~40 s a seed: CI runs the whole suite)
