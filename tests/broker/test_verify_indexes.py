"""`klog verify` holds every index of a segment to the batches it indexes, in its one walk of the
segment: the `.timeindex` (a wrong entry sends `consume --since` and ListOffsets by time past
records; a sealed segment without its final entry is skipped by them) and the `.txnindex` (a wrong
entry makes read_committed readers drop committed records; a missing one shows aborted ones to a
Kafka broker adopting the log), besides the `.index`. Each damaged index is one line under its own
file with a count, the exit status is 1, and `verify --repair` rebuilds the three from the log.

Method: a store with a transactional topic over two segments (commits and aborts, timestamps that
mostly grow, one transaction's below the rest), an index entry on every batch; then one index
damaged at a time, in one specific way, and verify's lines and exit status asserted."""

from __future__ import annotations

import glob
import json
import os
import struct
import time

import pytest

import klog
from klog.store import validate
from klog.store.txn import ABORTED_TXN

TXNS = 8  # transaction i: 3 records at offsets 4i..4i+2, its marker at 4i+3
ABORTED = {0, 3, 6}
LOW = 5  # this transaction's timestamps are below the ones before it
TIME_ENTRY = struct.Struct(">qi")


def _build(data_dir: str) -> None:
    # a minute ahead of the clock: the markers (stamped with the clock when written) never hold a
    # segment's largest timestamp, so which batches get time entries does not depend on timing
    now = int(time.time() * 1000) + 60_000
    with klog.open(data_dir) as store:
        store.create_topic("t", configs={"segment.bytes": "700", "index.interval.bytes": "0"})
        with store.producer(transactional_id="etl") as producer:
            for i in range(TXNS):
                producer.begin()
                for j in range(3):
                    ts = now - 1000 + j if i == LOW else now + 10 * i + j
                    producer.send("t", b"v-%d-%d" % (i, j), partition=0, timestamp=ts)
                producer.flush()  # (an aborted transaction's records reach the log)
                producer.abort() if i in ABORTED else producer.commit()


def _files(data_dir: str, suffix: str) -> list[str]:
    return sorted(glob.glob(os.path.join(data_dir, "logs", "t-0", "*" + suffix)))


def _read(path: str) -> bytearray:
    with open(path, "rb") as f:
        return bytearray(f.read())


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _time_entries(path: str) -> list[tuple[int, int]]:
    data = _read(path)
    return [TIME_ENTRY.unpack_from(data, at) for at in range(0, len(data), TIME_ENTRY.size)]


def _txn_entries(path: str) -> list[tuple[int, int, int, int, int]]:
    data = _read(path)
    return [ABORTED_TXN.unpack_from(data, at) for at in range(0, len(data), ABORTED_TXN.size)]


def _damaged_line(cli, path: str, count: int, problem: str) -> None:  # noqa: ANN001 - the cli fixture
    """verify exits 1 with one line for `path`: its count of problems and the first one."""
    r = cli("verify", "t")
    assert r.exit_code == 1, r
    [line] = r.out.splitlines()
    assert line.startswith("t-0 replica 0: DAMAGED — "), line
    more = f" (and {count - 1} more)" if count > 1 else ""
    assert line.split(" — ", 1)[1].split("; ") == [f"{path}: {count} index problems: {problem}{more}"], line


@pytest.fixture
def built(cli, data_dir):  # noqa: ANN001 - the cli fixture
    _build(data_dir)
    assert len(_files(data_dir, ".log")) == 2
    before = {path: bytes(_read(path)) for suffix in (".index", ".timeindex", ".txnindex")
              for path in _files(data_dir, suffix)}
    committed = cli("consume", "t", "-X", "isolation.level=read_committed")
    assert committed.exit_code == 0 and len(committed.stdout.splitlines()) == 3 * (TXNS - len(ABORTED))
    return data_dir, before, committed.stdout


def _repairs(cli, before: dict[str, bytes], committed: bytes) -> None:  # noqa: ANN001 - the cli fixture
    """--repair rebuilds the indexes from the log exactly as the writer wrote them, and verify is content."""
    r = cli("verify", "t", "--repair")
    assert r.exit_code == 0 and "repaired" in r.out, r
    assert cli("verify", "t").out == "t-0 replica 0: ok\n"
    assert {path: bytes(_read(path)) for path in before} == before
    assert cli("consume", "t", "-X", "isolation.level=read_committed").stdout == committed


def test_an_undamaged_store_verifies_ok_and_each_index_is_checked(cli, built):
    data_dir, before, _ = built
    assert cli("verify").out == "t-0 replica 0: ok\n"
    assert all(_time_entries(p) for p in _files(data_dir, ".timeindex"))
    assert [len(_txn_entries(p)) for p in _files(data_dir, ".txnindex")] == [2, 1]  # aborts 0 and 3; 6
    r = cli("verify", "t", "--json")
    assert r.exit_code == 0 and json.loads(r.out)["problems"] == []


@pytest.mark.parametrize("strict", [False, True], ids=["unmarked", "strict records"])
def test_verify_walks_each_segment_once(store, built, monkeypatch, strict):
    """The time and txn indexes are checked in the walk that validates the batches, and so are
    record attributes >= 0x80 (a second walk of every segment for them, LogSegment.iter_headers,
    took a third of verify's time): one walk of each segment."""
    from klog.store import segment

    walks: list[str] = []
    for module in (validate, segment):
        def counted(*args, real=module.walk_batches, name=module.__name__, **kwargs):  # noqa: ANN002, ANN003
            walks.append(name)
            return real(*args, **kwargs)

        monkeypatch.setattr(module, "walk_batches", counted)
    if strict:
        store.partition("t", 0).replicas[0].mark_strict_records()
    [report] = store.verify("t")
    assert report["ok"], report
    assert walks == ["klog.store.validate"] * 2, walks


# -- .timeindex ------------------------------------------------------------------------------------

def test_time_index_entries_out_of_order(cli, built):
    data_dir, before, committed = built
    path = _files(data_dir, ".timeindex")[0]
    data = _read(path)
    data[:24] = data[12:24] + data[:12]
    _write(path, data)
    (ts, rel) = _time_entries(path)[1]
    _damaged_line(cli, path, 1, f"time index entry 1 ({ts} at offset {rel}) goes backwards")
    _repairs(cli, before, committed)


def test_a_time_index_entry_past_the_segment(cli, built):
    data_dir, before, committed = built
    path = _files(data_dir, ".timeindex")[0]
    entries = _time_entries(path)
    ts, _ = entries[-1]
    _write(path, _read(path) + TIME_ENTRY.pack(ts + 1, 10_000))
    _damaged_line(cli, path, 1, f"time index entry {len(entries)} ({ts + 1} at offset 10000) points past the "
                                "segment's last valid batch")
    _repairs(cli, before, committed)


def test_a_time_index_entry_whose_timestamp_disagrees_with_the_batches(cli, built):
    data_dir, before, committed = built
    path = _files(data_dir, ".timeindex")[0]
    data = _read(path)
    ts, rel = TIME_ENTRY.unpack_from(data, 0)
    TIME_ENTRY.pack_into(data, 0, ts - 1, rel)  # a lookup for ts - 1 would start at offset `rel`
    _write(path, data)
    _damaged_line(cli, path, 1, f"time index entry 0 ({ts - 1} at offset {rel}) does not match the log: the largest "
                                f"timestamp up to offset {rel} is {ts}, first at offset {rel}")
    _repairs(cli, before, committed)


def test_a_time_index_entry_whose_offset_is_a_later_batch(cli, built):
    """(T, O) with O past the batch that first held T: a lookup for T starts after that batch's
    records and skips them."""
    data_dir, before, committed = built
    path = _files(data_dir, ".timeindex")[0]
    data = _read(path)
    (ts0, rel0), (ts1, rel1) = _time_entries(path)[:2]
    TIME_ENTRY.pack_into(data, 0, ts0, rel1 - 1)  # inside the batch of entry 1, which holds offsets up to rel1
    _write(path, data)
    _damaged_line(cli, path, 1, f"time index entry 0 ({ts0} at offset {rel1 - 1}) does not match the log: the "
                                f"largest timestamp up to offset {rel1} is {ts1}, first at offset {rel1}")
    _repairs(cli, before, committed)


def test_a_sealed_segment_without_its_final_time_entry(cli, built):
    """Lookups by time skip a sealed segment whose last entry is below a timestamp: without its
    final entry (the segment's largest timestamp) a `consume --since` skipped its last records."""
    data_dir, before, committed = built
    path = _files(data_dir, ".timeindex")[0]
    entries = _time_entries(path)
    ts, rel = max(entries)
    _write(path, _read(path)[:-TIME_ENTRY.size])
    assert max(_time_entries(path)) < (ts, rel)
    _damaged_line(cli, path, 1, f"time index lacks the sealed segment's final entry ({ts} at offset {rel})")
    _repairs(cli, before, committed)


def test_a_garbage_time_index_is_one_line_with_its_count(cli, built):
    data_dir, _, _ = built
    path = _files(data_dir, ".timeindex")[1]
    _write(path, b"".join(TIME_ENTRY.pack(10_000 - i, 1) for i in range(10_000)))
    r = cli("verify", "t")
    assert r.exit_code == 1 and len(r.out) < 1000, r
    assert f"{path}: 10000 index problems: time index entry 1 (9999 at offset 17) goes backwards (and 9999 more)" \
        in r.out


# -- .txnindex -------------------------------------------------------------------------------------

def _pid(data_dir: str) -> int:
    return _txn_entries(_files(data_dir, ".txnindex")[0])[0][1]


def _set_entry(path: str, i: int, **change: int) -> tuple[int, ...]:
    """Rewrite entry i's fields (producer, first, last, lso); returns the entry as it was."""
    data = _read(path)
    entry = ABORTED_TXN.unpack_from(data, i * ABORTED_TXN.size)
    fields = dict(zip(("version", "producer", "first", "last", "lso"), entry, strict=True))
    fields.update(change)
    ABORTED_TXN.pack_into(data, i * ABORTED_TXN.size, *fields.values())
    _write(path, data)
    return entry


def _text(pid: int, first: int, last: int, lso: int) -> str:
    return f"(producer {pid}, offsets {first}..{last}, last stable offset {lso})"


@pytest.mark.parametrize("field", ["first", "lso"])
def test_a_txn_index_entry_whose_range_disagrees_with_the_markers(cli, built, field):
    data_dir, before, committed = built
    path = _files(data_dir, ".txnindex")[0]
    _, pid, first, last, lso = _set_entry(path, 1, **{field: 0})  # abort 3: offsets 12..15
    assert (first, last, lso) == (12, 15, 16)
    got = _text(pid, 0, last, lso) if field == "first" else _text(pid, first, last, 0)
    _damaged_line(cli, path, 1, f"txn index entry 1 {got} does not match the log's aborted transaction "
                                f"{_text(pid, first, last, lso)}")
    _repairs(cli, before, committed)


@pytest.mark.parametrize("end", ["data batch", "commit marker", "other producer"])
def test_a_txn_index_entry_that_ends_at_no_abort_marker(cli, built, end):
    """An entry ending at a commit marker of its producer made read_committed readers drop that
    committed transaction; one ending at a data batch, or naming another producer, is no entry
    Kafka writes."""
    data_dir, before, committed = built
    path = _files(data_dir, ".txnindex")[0]
    pid = _pid(data_dir)
    entry = {"data batch": (pid, 4, 6, 7), "commit marker": (pid, 4, 7, 8), "other producer": (pid + 1, 0, 3, 4)}[end]
    _write(path, _read(path) + ABORTED_TXN.pack(0, *entry))
    _damaged_line(cli, path, 1, f"txn index entry 2 {_text(*entry)} ends at no ABORT marker of a transaction of "
                                "that producer in this segment")
    _repairs(cli, before, committed)


def test_a_repeated_txn_index_entry(cli, built):
    data_dir, before, committed = built
    path = _files(data_dir, ".txnindex")[0]
    _write(path, _read(path) + _read(path)[:ABORTED_TXN.size])
    pid = _pid(data_dir)
    _damaged_line(cli, path, 1, f"txn index entry 2 {_text(pid, 0, 3, 4)} repeats entry 0")
    _repairs(cli, before, committed)


def test_a_txn_index_without_an_aborted_transaction(cli, built):
    data_dir, before, committed = built
    path = _files(data_dir, ".txnindex")[0]
    pid = _pid(data_dir)
    _write(path, _read(path)[:ABORTED_TXN.size])  # abort 3 (offsets 12..15) lost
    _damaged_line(cli, path, 1, f"txn index lacks the aborted transaction {_text(pid, 12, 15, 16)}")
    _repairs(cli, before, committed)


def test_a_txn_index_entry_in_the_wrong_segment(cli, built):
    """Kafka indexes an aborted range in its marker's segment (the second segment's entry moved to
    the first): each segment's file is one line of its own."""
    data_dir, before, committed = built
    first, second = _files(data_dir, ".txnindex")
    _write(first, _read(first) + _read(second))
    _write(second, b"")
    [(_, pid, start, last, lso)] = _txn_entries_of(before[second])
    r = cli("verify", "t")
    assert r.exit_code == 1
    problems = r.out.strip().split(" — ", 1)[1].split("; ")
    assert problems == [f"{first}: 1 index problems: txn index entry 2 {_text(pid, start, last, lso)} ends at no "
                        "ABORT marker of a transaction of that producer in this segment",
                        f"{second}: 1 index problems: txn index lacks the aborted transaction "
                        f"{_text(pid, start, last, lso)}"], problems
    _repairs(cli, before, committed)


def test_an_unreadable_txn_index(cli, built):
    data_dir, before, committed = built
    path = _files(data_dir, ".txnindex")[1]
    _write(path, _read(path) + b"\0" * 5)  # a torn entry
    _damaged_line(cli, path, 1, "txn index cannot be read (not whole 34-byte entries of version 0)")
    _repairs(cli, before, committed)


def test_a_missing_txn_index_is_rebuilt(cli, built):
    data_dir, before, committed = built
    path = _files(data_dir, ".txnindex")[1]
    os.unlink(path)
    pid = _pid(data_dir)
    [(_, _, first, last, lso)] = _txn_entries_of(before[path])
    _damaged_line(cli, path, 1, f"txn index lacks the aborted transaction {_text(pid, first, last, lso)}")
    _repairs(cli, before, committed)


def _txn_entries_of(data: bytes) -> list[tuple[int, int, int, int, int]]:
    return [ABORTED_TXN.unpack_from(data, at) for at in range(0, len(data), ABORTED_TXN.size)]


def test_a_repair_that_re_copies_from_a_replica_leaves_the_txn_indexes_as_the_log_is(tmp_path, cli):
    """A replica damaged before its tail is cut and re-copied from an intact one: its `.txnindex`
    files are then rewritten from the log as it now is (here one was lost beside the damage, which
    the walk stopping at the damage could not see before the repair)."""
    dirs = [str(tmp_path / f"disk{i}") for i in range(2)]
    now = int(time.time() * 1000) + 60_000
    with klog.Store(str(tmp_path / "data"), log_dirs=dirs) as store:
        store.create_topic("t", replication_factor=2, configs={"segment.bytes": "700", "index.interval.bytes": "0"})
        with store.producer(transactional_id="etl") as producer:
            for i in range(TXNS):
                producer.begin()
                for j in range(3):
                    producer.send("t", b"v-%d-%d" % (i, j), partition=0, timestamp=now + 10 * i + j)
                producer.flush()
                producer.abort() if i in ABORTED else producer.commit()
        leader = store.topic("t").partitions[0].leader
    folder = os.path.join(dirs[leader], "t-0")
    indexes = sorted(glob.glob(os.path.join(folder, "*.txnindex")))
    kept = _read(indexes[-1])
    os.unlink(indexes[-1])  # abort 6's entry
    [last_log] = sorted(glob.glob(os.path.join(folder, "*.log")))[-1:]
    data = _read(last_log)
    data[-1] ^= 0x01  # the last batch (transaction 7's commit marker): its CRC fails
    _write(last_log, data)
    data_dir = str(tmp_path / "data")
    r = cli("verify", "t", "--data-dir", data_dir)
    assert r.exit_code == 1 and "CRC mismatch" in r.out and ".txnindex" not in r.out, r.out
    r = cli("verify", "t", "--repair", "--data-dir", data_dir)
    assert r.exit_code == 0 and "re-copied" in r.out and "rewrote the .txnindex of 1 segment(s)" in r.out, r.out
    assert cli("verify", "t", "--data-dir", data_dir).out.count(": ok") == 2
    assert _read(indexes[-1]) == kept
