"""Offset and timestamp lookups through the sparse indexes, against brute force over a model.

Logs are built with PartitionLog and small segment.bytes / index.interval.bytes values, so there
are several segments and many index entries. The model is the list of batches appended; lookups
must equal a scan of it, and the `.index` / `.timeindex` files must hold exactly the entries
Kafka's writing rule gives (kafka-log-format.md §2), decoded against the `.log` itself.
"""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klog.store import codec
from klog.store.config import LogConfig
from klog.store.format import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    OFFSET_INDEX_ENTRY,
    TIME_INDEX_ENTRY,
    TIME_INDEX_SUFFIX,
    segment_file_name,
)
from klog.store.log import PartitionLog
from klog.store.state import ReplicaState

TS = 1_700_000_000_000


@dataclass
class ModelBatch:
    base: int
    last: int
    data: bytes
    records: list[tuple[int, int]]  # (offset, timestamp)

    @property
    def max_timestamp(self) -> int:
        return max(ts for _, ts in self.records)


@dataclass
class Built:
    directory: str
    config: LogConfig
    log: PartitionLog
    batches: list[ModelBatch]
    recovered: bool = False

    @property
    def end(self) -> int:
        return self.batches[-1].last + 1


def _timestamps(rng: random.Random, n: int, mode: str, clock: list[int]) -> list[int]:
    out = []
    for _ in range(n):
        if mode == "monotonic":
            clock[0] += rng.choice((0, 1, 1, 5, 100))
            out.append(clock[0])
        elif mode == "sparse":  # big steps: segment.ms rolls segments too
            clock[0] += rng.choice((0, 50, 400))
            out.append(clock[0])
        elif mode == "jitter":  # mostly rising, often going back a little, with ties
            clock[0] += rng.choice((0, 3, 10))
            out.append(clock[0] - rng.choice((0, 0, 7, 25)))
        else:  # "random": no order at all, many ties
            out.append(TS + rng.randrange(0, 400, 2))
    return out


def build_log(directory: str, seed: int, *, n_batches: int = 120, segment_bytes: int = 4000,
              index_interval_bytes: int = 300, mode: str = "jitter", reopen_at: tuple[int, ...] = (),
              recover_at: tuple[int, ...] = (), max_records: int = 6, max_value: int = 250,
              segment_ms: int = LogConfig.segment_ms) -> Built:
    """Append n_batches random batches, closing and reopening the writer at the given batch indexes.

    At the recover_at ones the writer's state file is removed first, so opening runs the unclean
    shutdown recovery (every segment rescanned and its indexes rebuilt).
    """
    rng = random.Random(seed)
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes,
                       flush_messages=1 << 30, segment_ms=segment_ms)
    log = PartitionLog(directory, config)
    log.open_for_write()
    clock = [TS]
    batches: list[ModelBatch] = []
    for i in range(n_batches):
        if i in reopen_at or i in recover_at:
            log.flush()
            log.close()
            if i in recover_at:
                os.unlink(os.path.join(directory, ReplicaState.FILE_NAME))
            log = PartitionLog(directory, config)
            log.open_for_write()
        n = rng.randint(1, max_records)
        records = [(rng.choice((None, b"key")), rng.randbytes(rng.randint(0, max_value)), [], ts)
                   for ts in _timestamps(rng, n, mode, clock)]
        base = log.log_end_offset
        assert base == (batches[-1].last + 1 if batches else 0)
        batch = codec.encode_batch(records, base)
        header = codec.read_header(batch)
        log.append(batch, header)
        batches.append(ModelBatch(base, header.last_offset, batch, [(base + j, r[3]) for j, r in enumerate(records)]))
    log.flush()
    return Built(directory, config, log, batches, bool(recover_at))


def first_batch_holding(batches: list[ModelBatch], offset: int) -> ModelBatch | None:
    return next((b for b in batches if b.last >= offset), None)


def brute_offset_for_timestamp(batches: list[ModelBatch], timestamp: int, upper: int) -> int | None:
    for b in batches:
        for offset, ts in b.records:
            if ts >= timestamp:
                return offset if offset < upper else None
    return None


def segment_batches(directory: str, base: int) -> list[tuple[int, codec.BatchHeader, bytes]]:
    """(position, header, bytes) of every batch in a segment's .log."""
    with open(os.path.join(directory, segment_file_name(base, LOG_SUFFIX)), "rb") as f:
        data = f.read()
    out = []
    pos = 0
    while pos < len(data):
        header = codec.read_header(data, pos)
        assert codec.crc_ok(data, pos, header)
        out.append((pos, header, data[pos:pos + header.size]))
        pos += header.size
    assert pos == len(data)
    return out


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> list[Built]:
    """A few logs with different shapes, shared by the tests of this module (they only read)."""
    specs = [
        dict(seed=1, mode="monotonic"),
        dict(seed=2, mode="jitter", reopen_at=(40, 41, 90)),
        dict(seed=3, mode="random", segment_bytes=2500, index_interval_bytes=100),
        # index.interval.bytes 0: an entry for every batch but a segment's first; recovered twice
        dict(seed=4, mode="jitter", segment_bytes=6000, index_interval_bytes=0, recover_at=(30, 75)),
        dict(seed=5, mode="random", n_batches=60, max_records=1, max_value=40, index_interval_bytes=150,
             segment_bytes=1500),
        dict(seed=6, mode="sparse", segment_bytes=50_000, segment_ms=3000, index_interval_bytes=200),
    ]
    built = []
    for i, spec in enumerate(specs):
        directory = str(tmp_path_factory.mktemp(f"log{i}") / "t-0")
        built.append(build_log(directory, **spec))
    yield built
    for b in built:
        b.log.close()


def _ids(built: Built) -> str:
    return os.path.basename(os.path.dirname(built.directory))


def test_logs_have_several_segments_and_many_entries(logs: list[Built]) -> None:
    for built in logs:
        bases = built.log.bases
        assert len(bases) >= 3, (built.directory, bases)
        entries = sum(os.path.getsize(os.path.join(built.directory, segment_file_name(b, INDEX_SUFFIX)))
                      for b in bases) // 8
        assert entries >= 15, (built.directory, entries)


@pytest.mark.parametrize("which", range(6))
def test_segments_hold_the_model_batches(logs: list[Built], which: int) -> None:
    built = logs[which]
    on_disk = []
    for base in built.log.bases:
        found = segment_batches(built.directory, base)
        assert found, f"empty segment {base}"
        assert found[0][1].base_offset == base  # a segment is named after its first batch
        on_disk += [data for _, _, data in found]
    assert on_disk == [b.data for b in built.batches]


@pytest.mark.parametrize("which", range(6))
def test_read_from_every_offset(logs: list[Built], which: int) -> None:
    built = logs[which]
    log, batches, end = built.log, built.batches, built.end
    rng = random.Random(which)
    for offset in range(end + 2):
        want = first_batch_holding(batches, offset)
        got = log.read(offset, end)
        if want is None:
            assert got == [], offset
            continue
        assert got, offset
        assert got[0].header.base_offset == want.base and got[0].data == want.data, offset
        # the rest follow in order, without gaps
        i = batches.index(want)
        assert [g.data for g in got] == [b.data for b in batches[i:i + len(got)]]
        # one byte of budget still returns the one batch holding the offset
        one = log.read(offset, end, max_bytes=1)
        assert [g.data for g in one] == [want.data], offset
        # an upper bound inside the log: nothing at or above it
        upper = rng.randint(offset, end)
        bounded = log.read(offset, upper)
        assert all(g.header.base_offset < upper for g in bounded)
        if offset < upper:
            assert bounded and bounded[0].data == want.data
        else:
            assert bounded == []
    # the records decode to the model
    offset = 0
    seen = []
    while offset < end:
        got = log.read(offset, end, max_bytes=3000)
        for fetched in got:
            seen += [(o, ts) for o, ts, *_ in fetched.records()]
        offset = got[-1].header.next_offset
    assert seen == [r for b in batches for r in b.records]


@pytest.mark.parametrize("which", range(6))
def test_read_from_a_fresh_reader(logs: list[Built], which: int) -> None:
    """Another process's view: a new PartitionLog on the same folder, without writing."""
    built = logs[which]
    reader = PartitionLog(built.directory, built.config)
    try:
        for offset in range(0, built.end, 3):
            got = reader.read(offset, built.end, max_bytes=1)
            assert [g.data for g in got] == [first_batch_holding(built.batches, offset).data]
    finally:
        reader.close()


@pytest.mark.parametrize("which", range(6))
def test_offset_for_timestamp_matches_brute_force(logs: list[Built], which: int) -> None:
    built = logs[which]
    log, batches, end = built.log, built.batches, built.end
    stamps = sorted({ts for b in batches for _, ts in b.records})
    targets = sorted({t + d for t in stamps for d in (-1, 0, 1)} | {stamps[0] - 1000, stamps[-1] + 1000, 0, -1})
    rng = random.Random(100 + which)
    for ts in targets:
        for upper in (end, rng.randint(0, end)):
            want = brute_offset_for_timestamp(batches, ts, upper)
            assert log.offset_for_timestamp(ts, upper) == want, (ts, upper)


def _expected_entries(directory: str, base: int, interval: int, sealed: bool) -> tuple[list, list]:
    """Kafka's LogSegment.append rule replayed over the segment's .log (plus the seal entry)."""
    index, time_index = [], []
    since = 0
    max_ts, max_ts_offset = -1, -1
    for pos, header, _ in segment_batches(directory, base):
        if header.max_timestamp > max_ts:
            max_ts, max_ts_offset = header.max_timestamp, header.last_offset
        if since > interval:
            index.append((header.last_offset - base, pos))
            if max_ts > (time_index[-1][0] if time_index else -1):  # an empty index reads as (-1, base)
                time_index.append((max_ts, max_ts_offset - base))
            since = 0
        since += header.size
    if sealed and max_ts > (time_index[-1][0] if time_index else -1):
        time_index.append((max_ts, max_ts_offset - base))
    return index, time_index


def check_index_files(directory: str, bases: list[int], interval: int, exact_time_index: bool) -> None:
    """The .index/.timeindex of every segment, decoded against its .log (kafka-log-format.md §2)."""
    for base in bases:
        batches = segment_batches(directory, base)
        starts = {pos: header for pos, header, _ in batches}
        with open(os.path.join(directory, segment_file_name(base, INDEX_SUFFIX)), "rb") as f:
            raw = f.read()
        assert len(raw) % 8 == 0, "trimmed: whole 8-byte entries, no preallocated tail"
        index = [OFFSET_INDEX_ENTRY.unpack_from(raw, i) for i in range(0, len(raw), 8)]
        for (r1, p1), (r2, p2) in zip(index, index[1:], strict=False):
            assert r2 > r1 and p2 > p1, (base, index)
        for rel, pos in index:
            assert pos in starts and pos > 0, (base, rel, pos)  # a batch start, never the first batch
            assert starts[pos].last_offset - base == rel  # mapped from that batch's last offset
        with open(os.path.join(directory, segment_file_name(base, TIME_INDEX_SUFFIX)), "rb") as f:
            raw = f.read()
        assert len(raw) % 12 == 0
        time_index = [TIME_INDEX_ENTRY.unpack_from(raw, i) for i in range(0, len(raw), 12)]
        for (t1, o1), (t2, o2) in zip(time_index, time_index[1:], strict=False):
            assert t2 > t1 and o2 >= o1, (base, time_index)
        # (T, O): T is the largest timestamp up to the batch whose last offset is O, first reached there
        by_last = {header.last_offset - base: header for _, header, _ in batches}
        for ts, rel in time_index:
            assert rel in by_last and by_last[rel].max_timestamp == ts, (base, ts, rel)
            assert max(h.max_timestamp for _, h, _ in batches if h.last_offset - base <= rel) == ts
            assert all(h.max_timestamp < ts for _, h, _ in batches if h.last_offset - base < rel)
        want_index, want_time = _expected_entries(directory, base, interval, sealed=base != bases[-1])
        assert index == want_index, base  # recovery rebuilds with the same rule
        # After a recovery the time index depends on history (Kafka's recover, like klog's, appends
        # the final entry to the active segment too, and appends continue after it): only the
        # meaning of each entry, checked above, is fixed then.
        if exact_time_index:
            assert time_index == want_time, base


@pytest.mark.parametrize("which", range(6))
def test_index_files_match_the_log(logs: list[Built], which: int) -> None:
    built = logs[which]
    check_index_files(built.directory, built.log.bases, built.config.index_interval_bytes,
                      exact_time_index=not built.recovered)


def test_reads_below_a_deleted_first_segment(logs: list[Built], tmp_path) -> None:
    """With the oldest segment gone (retention), offsets below the log start read from the first one left."""
    built = logs[0]
    directory = str(tmp_path / "t-0")
    shutil.copytree(built.directory, directory)
    first, second = built.log.bases[:2]
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        os.unlink(os.path.join(directory, segment_file_name(first, suffix)))
    reader = PartitionLog(directory, built.config)
    try:
        assert reader.first_offset() == second
        kept = [b for b in built.batches if b.base >= second]
        for offset in range(0, second + 3):
            got = reader.read(offset, built.end, max_bytes=1)
            assert [g.data for g in got] == [first_batch_holding(kept, offset).data], offset
        stamps = sorted({ts for b in kept for _, ts in b.records})
        for ts in stamps[:: max(1, len(stamps) // 40)]:
            assert reader.offset_for_timestamp(ts, built.end) == brute_offset_for_timestamp(kept, ts, built.end)
    finally:
        reader.close()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), mode=st.sampled_from(["monotonic", "jitter", "random"]),
       segment_bytes=st.integers(800, 5000), interval=st.integers(0, 600), n_batches=st.integers(1, 50),
       reopen=st.lists(st.integers(1, 49), max_size=2), recover=st.lists(st.integers(1, 49), max_size=1))
def test_hypothesis_small_logs(tmp_path_factory, seed, mode, segment_bytes, interval, n_batches, reopen,
                               recover) -> None:
    directory = str(tmp_path_factory.mktemp("h") / "t-0")
    built = build_log(directory, seed, n_batches=n_batches, segment_bytes=segment_bytes,
                      index_interval_bytes=interval, mode=mode, reopen_at=tuple(reopen),
                      recover_at=tuple(recover), max_value=120)
    try:
        log, batches, end = built.log, built.batches, built.end
        for offset in range(end):
            got = log.read(offset, end, max_bytes=1)
            assert [g.data for g in got] == [first_batch_holding(batches, offset).data], offset
        stamps = sorted({ts for b in batches for _, ts in b.records})
        for ts in {t + d for t in stamps for d in (-1, 0, 1)}:
            assert log.offset_for_timestamp(ts, end) == brute_offset_for_timestamp(batches, ts, end), ts
        check_index_files(directory, log.bases, interval, exact_time_index=not built.recovered)
    finally:
        built.log.close()


def test_batches_without_timestamps_get_offset_index_entries(tmp_path) -> None:
    log = PartitionLog(str(tmp_path / "t-0"), LogConfig(index_interval_bytes=0, flush_messages=1 << 30))
    log.open_for_write()
    try:
        batches = []
        for _ in range(3):
            batch = codec.encode_batch([(None, b"v", [], -1)], log.log_end_offset)
            log.append(batch, codec.read_header(batch))  # the second append raises ValueError
            batches.append(batch)
        log.flush()
        assert [g.data for g in log.read(0, 3)] == batches
        # Kafka: .index entries for the 2nd and 3rd batch, no .timeindex entry (-1 is not > -1)
        check_index_files(log.directory, log.bases, 0, exact_time_index=True)
        with open(os.path.join(log.directory, segment_file_name(0, INDEX_SUFFIX)), "rb") as f:
            assert len(f.read()) == 16
    finally:
        log.close()


@pytest.mark.parametrize("recover", [False, True], ids=["clean", "recovered"])
def test_segments_roll_before_a_relative_offset_overflows(tmp_path, monkeypatch, recover: bool) -> None:
    """Kafka rolls when a batch's last offset no longer fits the segment's int32 relative offsets;
    with the limit made small, segments must roll at exactly those batches, and reads, timestamp
    lookups and both indexes must stay right (also after a recovery rebuilt the indexes)."""
    import klog.store.segment as segment_module
    import klog.store.validate as validate_module

    limit = 9  # relative offsets 0..9: ten offsets per segment at most
    monkeypatch.setattr(segment_module, "RELATIVE_OFFSET_MAX", limit)
    monkeypatch.setattr(validate_module, "RELATIVE_OFFSET_MAX", limit)
    directory = str(tmp_path / "t-0")
    built = build_log(directory, 11, n_batches=45, segment_bytes=1 << 30, index_interval_bytes=0, max_records=4,
                      recover_at=(30,) if recover else ())
    try:
        want_bases: list[int] = []
        for b in built.batches:  # the model: a new segment at the first batch that would not fit
            if not want_bases or b.last - want_bases[-1] > limit:
                want_bases.append(b.base)
        assert built.log.bases == want_bases and len(want_bases) >= 6
        ends = want_bases[1:] + [built.end]
        for base, end in zip(want_bases, ends, strict=True):
            found = segment_batches(directory, base)
            assert [h.base_offset for _, h, _ in found] == [b.base for b in built.batches if base <= b.base < end]
            assert found[-1][1].last_offset - base <= limit
            after = first_batch_holding(built.batches, end)
            assert after is None or after.last - base > limit  # rolled no earlier than needed
        check_index_files(directory, built.log.bases, 0, exact_time_index=not recover)
        for offset in range(built.end):
            got = built.log.read(offset, built.end, max_bytes=1)
            assert [g.data for g in got] == [first_batch_holding(built.batches, offset).data], offset
        stamps = sorted({ts for b in built.batches for _, ts in b.records})
        for ts in stamps:
            assert built.log.offset_for_timestamp(ts, built.end) == brute_offset_for_timestamp(built.batches, ts,
                                                                                                 built.end)
    finally:
        built.log.close()
