"""The library calls under `klog produce` input and `consume --grep/--last`: klog.client.ingest,
klog.client.filters and klog.client.newest, used from Python as the README shows."""

from __future__ import annotations

import io
import os
import re

import pytest

from klog.client.filters import RecordFilter
from klog.client.ingest import produce_from
from klog.client.newest import newest_records
from klog.errors import UsageError


def values(store, topic: str) -> list[bytes]:
    return [r.value for r in store.consumer(topic)]


def test_produce_from_a_stream_a_path_and_a_descriptor_counts_lines_across_them(store, tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"c\nd")
    fd = os.open(path, os.O_RDONLY)
    try:
        counts = produce_from(store.producer(), "t", io.BytesIO(b"a\nb\n"), str(path), fd)
    finally:
        os.close(fd)
    assert counts == (6, 6)
    assert values(store, "t") == [b"a", b"b", b"c", b"d", b"c", b"d"]



def test_produce_from_writes_every_source_and_gives_the_gc_back(store, tmp_path):
    """The last source's records are written before the GC is turned back on (they are freed
    rather than walked by it); a library caller still gets its GC enabled afterwards, and records
    of every source are written, the earlier sources' ones too."""
    import gc

    store.create_topic("wide", partitions=8)
    first = b"".join(b"k%d:a%d\n" % (i, i) for i in range(3000))
    path = tmp_path / "second.txt"
    path.write_bytes(b"".join(b"k%d:b%d\n" % (i, i) for i in range(3000)))
    assert gc.isenabled()
    counts = produce_from(store.producer(), "wide", io.BytesIO(first), str(path), key_separator=b":")
    assert gc.isenabled()
    assert counts == (6000, 6000)
    want = [b"a%d" % i for i in range(3000)] + [b"b%d" % i for i in range(3000)]
    assert sorted(values(store, "wide")) == sorted(want)

def test_key_separator_and_constant_key(store):
    produce_from(store.producer(), "k", io.BytesIO(b"u1,one\nnokey\n"), key_separator=b",")
    produce_from(store.producer(), "k", io.BytesIO(b"x;y"), key=b"K", delimiter=b";")
    assert [(r.key, r.value) for r in store.consumer("k")] == [(b"u1", b"one"), (None, b"nokey"),
                                                               (b"K", b"x"), (b"K", b"y")]


def test_json_error_names_the_line_and_keeps_the_records_before_it(store):
    lines = b'{"value": "a"}\n\n{"value": "b"}\n{"value": \n{"value": "c"}\n'
    with pytest.raises(UsageError, match=r"^line 4: malformed JSON input: .*; 2 records before it were written"):
        produce_from(store.producer(), "j", io.BytesIO(lines), input_format="json")
    assert values(store, "j") == [b"a", b"b"]


def test_json_partition_fallback_is_reported_once_to_the_callback(store):
    store.create_topic("one", partitions=1)
    heard: list[str] = []
    env = b'{"value": "a", "partition": 3}\n{"value": "b", "partition": 3}\n'
    counts = produce_from(store.producer(), "one", io.BytesIO(env), input_format="json", on_warning=heard.append)
    assert counts.records == 2 and len(heard) == 1
    assert heard[0].startswith("line 1: topic 'one' has no partition 3 (it has 1)")


def test_options_that_do_not_go_together_are_usage_errors(store):
    with pytest.raises(UsageError, match="--key-separator works with --input lines only"):
        produce_from(store.producer(), "t", io.BytesIO(b"x"), input_format="raw", key_separator=b",")
    with pytest.raises(UsageError, match="invalid --input 'csv'"):
        produce_from(store.producer(), "t", io.BytesIO(b"x"), input_format="csv")


def test_record_filter_matches_value_key_and_header(store):
    p = store.producer()
    p.send("g", b"one", key=b"user-1", headers=[("src", b"web")])
    p.send("g", b"two", key=b"user-2")
    p.send("g", b"three")
    p.flush()
    def read(f):  # noqa: ANN001, ANN202
        return [r.value for r in store.consumer("g", record_filter=f)]
    assert read(RecordFilter(key="-2$")) == [b"two"]
    assert read(RecordFilter(header=b"^src=web$")) == [b"one"]
    assert read(RecordFilter(value=re.compile(b"^t"), key="user")) == [b"two"]
    assert RecordFilter.of() is None
    with pytest.raises(UsageError, match=r"invalid --grep-key '\('"):
        RecordFilter(key="(")


def test_newest_records_are_the_newest_of_all_partitions_in_time_order(store):
    store.create_topic("n", partitions=3)
    p = store.producer()
    for i in range(30):
        p.send("n", b"v%d" % i, partition=i % 3, timestamp=1_000 + i)
    p.flush()
    newest, rest = newest_records(store, ["n"], 4)
    assert [r.value for r in newest] == [b"v26", b"v27", b"v28", b"v29"] and rest is None
    newest, _ = newest_records(store, ["n"], 4, count=2)
    assert [r.value for r in newest] == [b"v26", b"v27"]


def test_a_pipe_that_goes_quiet_has_what_was_read_written_but_a_busy_one_is_not_flushed_per_read(store):
    """Lines read from a pipe are written when the writer pauses (an interactive producer), not
    only at its end; while more input is already waiting, no flush (acks=all: an fsync) per read."""
    import threading
    import time

    from klog.client import ingest

    store.create_topic("p")
    producer = store.producer()
    flushes: list[int] = []
    real_flush = producer.flush
    producer.flush = lambda: (flushes.append(producer.records_sent), real_flush())[1]  # type: ignore[method-assign]
    read_end, write_end = os.pipe()
    feeder = threading.Thread(target=ingest.Ingest(producer, "p").feed, args=(read_end,), daemon=True)
    feeder.start()
    try:
        os.write(write_end, b"first\nsecond\n")
        deadline = time.monotonic() + 10
        while values(store, "p") != [b"first", b"second"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert values(store, "p") == [b"first", b"second"]  # the pipe is still open
        flushes.clear()
        # a burst larger than the pipe holds: the reader gets it in several reads, each with more
        # waiting behind it (the writer blocks on the full pipe), so it need not flush until the end
        burst = b"".join(b"%07d\n" % i for i in range(100_000))
        os.write(write_end, burst)
    finally:
        os.close(write_end)
    feeder.join(10)
    os.close(read_end)
    assert not feeder.is_alive()
    producer.flush = real_flush  # type: ignore[method-assign]
    producer.flush()
    assert len(values(store, "p")) == 100_002
    assert len(flushes) < 10, flushes  # one per 64 KiB read would be ~12


@pytest.mark.parametrize("delimiter", [b"\n", b"\r\n", b"ab"])
def test_lines_split_across_reads_of_any_size_come_out_whole(store, delimiter):
    """However the input is cut into reads (a pipe hands over what it has), each record is one
    whole line: a line, or a multi-byte delimiter, cut between two reads is joined again."""
    import random

    rng = random.Random(5)
    records = [b"x" * rng.randrange(0, 50) + b"%d" % i for i in range(3000)]
    data = delimiter.join(records)

    class Trickle:
        def __init__(self) -> None:
            self.pos = 0

        def read(self, n: int) -> bytes:
            size = min(n, rng.choice([1, 2, 3, 7, 100, 4096]))
            out = data[self.pos:self.pos + size]
            self.pos += len(out)
            return out

    store.create_topic("s")
    counts = produce_from(store.producer(), "s", Trickle(), delimiter=delimiter)
    assert counts == (3000, 3000)
    assert values(store, "s") == records
