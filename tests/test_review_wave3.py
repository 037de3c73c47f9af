"""Review of wave 3, end to end through the CLI and `klog serve`: retention's `.deleted` files,
the compiled record reader on real clients' batches, the Produce validator, the long-poll watcher
and the library moves behind `consume --group --exec` and `replay`."""

from __future__ import annotations

import datetime
import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import time

import pytest

from klog.store import codec, compression, fastrecords
from klog.store.format import ATTRIBUTES_OFFSET, CRC_OFFSET, RECORDS_OFFSET
from tests.conftest import REPO
from tests.serve_helpers import RawClient, batch, produce


def _env(data_dir: str) -> dict:
    return {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}


def _live_log_bytes(folder: str) -> int:
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(folder, "*.log")))


def _with_deleted_files(cli, topic: str, delay_ms: int | None = None) -> None:
    """A topic whose retention has renamed segments to `.deleted` (several produce runs, one
    segment each, then retention.bytes keeps the last ~2). In-process runs of the same commands:
    the tests' reads and kills are the real processes."""
    configs = ["-c", "segment.bytes=1024", "-c", "retention.bytes=2048"]
    if delay_ms is not None:
        configs += ["-c", f"file.delete.delay.ms={delay_ms}"]
    assert cli("topics", "create", topic, *configs).exit_code == 0
    for i in range(6):
        assert cli("produce", topic, input=b"".join(b"%d-%d\n" % (i, n) for n in range(100))).exit_code == 0
    assert cli("topics", "clean", topic).exit_code == 0


# -- 1. file.delete.delay.ms ---------------------------------------------------------------------
def test_deleted_files_are_ignored_by_verify_describe_dump_consume_and_import(cli, klog_proc, data_dir, tmp_path):
    _with_deleted_files(cli, "ret")
    folder = os.path.join(data_dir, "logs", "ret-0")
    deleted = sorted(n for n in os.listdir(folder) if n.endswith(".deleted"))
    assert any(n.endswith(".log.deleted") for n in deleted)  # the default delay keeps them 60 s

    verify = klog_proc("verify", "ret")
    assert verify.returncode == 0 and b"deleted" not in verify.stdout + verify.stderr

    (described,) = json.loads(klog_proc("topics", "describe", "ret", "--json").stdout)["partitions"]
    assert described["size_bytes"] == _live_log_bytes(folder)  # the live segments, not the retired ones
    assert described["segments"] == len(glob.glob(os.path.join(folder, "*.log")))
    start = json.loads(klog_proc("offsets", "ret", "--json").stdout)["earliest"]
    assert start > 0

    dump = klog_proc("dump", folder)
    assert dump.returncode == 0
    dumped = [line for line in dump.stdout.decode().splitlines() if line.startswith("Dumping")]
    assert dumped and not any(line.endswith(".deleted") for line in dumped)

    consumed = klog_proc("consume", "ret")
    assert consumed.returncode == 0
    lines = consumed.stdout.decode().splitlines()
    assert len(lines) == 600 - start and lines[-1] == "5-99"

    kafka = tmp_path / "kafka"
    shutil.copytree(folder, kafka / "imp-0")
    os.unlink(kafka / "imp-0" / "klog-replica.state")
    other = str(tmp_path / "other")
    imported = klog_proc("dirs", "import", str(kafka), "-d", other)
    assert imported.returncode == 0, imported.stderr
    assert not [n for n in os.listdir(os.path.join(other, "logs", "imp-0")) if n.endswith(".deleted")]
    assert klog_proc("consume", "imp", "-d", other).stdout.decode().splitlines() == lines


def test_describe_log_dirs_counts_live_segments_only(cli, data_dir):
    from klog.server import Server

    _with_deleted_files(cli, "dl")
    folder = os.path.join(data_dir, "logs", "dl-0")
    assert glob.glob(os.path.join(folder, "*.log.deleted"))
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000) as server, RawClient(server.port) as client:
        resp = client.send(35, 4, topics=None)
    (topic,) = [t for r in resp.results for t in r.topics if t.name == "dl"]
    assert [p.partition_size for p in topic.partitions] == [_live_log_bytes(folder)]


@pytest.mark.slow
def test_expired_deleted_files_go_at_the_next_writer_open_and_topics_delete_takes_them(cli, klog_proc,
                                                                                       data_dir):
    _with_deleted_files(cli, "exp", delay_ms=300)
    folder = os.path.join(data_dir, "logs", "exp-0")
    assert glob.glob(os.path.join(folder, "*.deleted"))  # not yet: 300 ms
    time.sleep(0.5)
    assert klog_proc("produce", "exp", input=b"more\n").returncode == 0  # a writer open removes them
    assert not glob.glob(os.path.join(folder, "*.deleted"))
    assert klog_proc("consume", "exp").stdout.decode().splitlines()[-1] == "more"

    _with_deleted_files(cli, "gone")
    assert glob.glob(os.path.join(data_dir, "logs", "gone-0", "*.deleted"))
    assert klog_proc("topics", "delete", "gone", "--yes").returncode == 0
    assert not os.path.exists(os.path.join(data_dir, "logs", "gone-0"))


def test_a_writer_killed_after_retention_reopens_clean(cli, klog_proc, data_dir):
    """kill -9 of a producer whose retention left `.deleted` files: the next run reads and writes."""
    _with_deleted_files(cli, "k9")
    proc = subprocess.Popen([sys.executable, "-m", "klog", "produce", "k9"], stdin=subprocess.PIPE,
                            env=_env(data_dir), stderr=subprocess.DEVNULL)
    try:
        proc.stdin.write(b"x\n" * 2000)
        proc.stdin.flush()
        time.sleep(1.0)
    finally:
        proc.kill()
        proc.wait(10)
    assert klog_proc("verify", "k9").returncode == 0
    assert klog_proc("produce", "k9", input=b"after\n").returncode == 0
    out = klog_proc("consume", "k9")
    assert out.returncode == 0 and out.stdout.decode().splitlines()[-1] == "after"


# -- 2. the compiled record reader on real clients' batches --------------------------------------
def _records(i: int) -> tuple[bytes | None, bytes | None, list | None]:
    key = None if i % 3 == 0 else b"k%d" % i
    value = None if i % 7 == 0 else b"v%d-" % i + b"x" * (i % 50)
    headers = [("h", b"%d" % i), ("n", None)] if i % 2 else None
    return key, value, headers


@pytest.mark.slow
@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_batches_decode_the_same_fast_and_slow(kafka_server, data_dir, klog_proc, monkeypatch, compression):
    confluent = pytest.importorskip("confluent_kafka")
    monkeypatch.setattr(fastrecords, "FAST_MIN_RECORDS", 1)
    topic = f"c-{compression}"
    kafka_server.store.create_topic(topic)
    producer = confluent.Producer({"bootstrap.servers": kafka_server.bootstrap, "compression.type": compression,
                                   "linger.ms": 20, "message.timeout.ms": 20_000})
    for i in range(300):
        key, value, headers = _records(i)
        producer.produce(topic, value=value, key=key, headers=headers, partition=0)
        if i == 150:
            producer.flush(20)  # at least two batches
    assert producer.flush(20) == 0

    batches = 0
    for path in glob.glob(os.path.join(data_dir, "logs", f"{topic}-0", "*.log")):
        with open(path, "rb") as f:
            buf = f.read()
        pos = 0
        while pos < len(buf):
            header = codec.read_header(buf, pos)
            assert header.codec == {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[compression]
            slow = codec.decode_batch_records(buf, pos, header, fast=False)
            assert codec.decode_batch_records(buf, pos, header, fast=True) == slow
            assert codec.decode_batch_values(buf, pos, header, fast=True) == \
                codec.decode_batch_values(buf, pos, header, fast=False)
            pos += header.size
            batches += 1
    assert batches >= 2

    out = klog_proc("consume", topic, "--json")
    assert out.returncode == 0, out.stderr
    got = [json.loads(line) for line in out.stdout.decode().splitlines()]
    assert [r["offset"] for r in got] == list(range(300))
    for i, r in enumerate(got):
        key, value, headers = _records(i)
        assert r["key"] == (key.decode() if key is not None else None)
        assert r["value"] == (value.decode() if value is not None else None)
        assert len(r["headers"]) == (2 if headers else 0)


def _fixed_crc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, CRC_OFFSET, codec.crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)


def _broken_batch(count: int = 100) -> bytes:
    """A CRC-valid batch whose first record claims one byte more than it has."""
    buf = bytearray(batch([b"value-%03d" % i for i in range(count)]))
    assert buf[RECORDS_OFFSET] < 0x7E
    buf[RECORDS_OFFSET] += 2  # zigzag: length + 1
    return _fixed_crc(buf)


def test_consume_of_a_crc_valid_batch_with_broken_records_fails_in_one_line(klog_proc, data_dir):
    """On disk (written behind klog's back): the compiled reader must not hand out wrong records."""
    assert klog_proc("produce", "bad", input=b"".join(b"ok-%d\n" % i for i in range(100))).returncode == 0
    (path,) = glob.glob(os.path.join(data_dir, "logs", "bad-0", "*.log"))
    with open(path, "wb") as f:  # the same offsets 0..99, a CRC that checks, a record that does not
        f.write(_broken_batch(100))
    out = klog_proc("consume", "bad")
    err = out.stderr.decode()
    assert out.returncode == 1, (out.returncode, out.stdout[:200], err)
    assert err.count("\n") == 1 and err.startswith("klog: ") and "Traceback" not in err
    assert b"value-" not in out.stdout  # no wrong records before the failure


# -- 3. the Produce validator --------------------------------------------------------------------
def test_serve_answers_corrupt_message_to_a_crc_valid_batch_with_broken_records(kafka_server, data_dir, klog_proc):
    kafka_server.store.create_topic("cm")
    with RawClient(kafka_server.port) as client:
        for count in (3, 100):  # below and above the compiled reader's threshold
            assert produce(client, "cm", 0, _broken_batch(count))[0] == 2  # CORRUPT_MESSAGE
        assert produce(client, "cm", 0, batch([b"sound"]))[0] == 0  # the connection keeps serving
    assert klog_proc("consume", "cm").stdout == b"sound\n"


def _refit(buf: bytearray) -> bytes:
    """The batch length and CRC made to match its (altered) bytes."""
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    return _fixed_crc(buf)


def _malformed(kind: str) -> bytes:
    good = bytearray(batch([b"v%03d" % i for i in range(100)]))
    if kind in compression.CODEC_IDS:  # the records section compressed, one record's length off by one
        section = bytearray(good[RECORDS_OFFSET:])
        section[0] += 2
        codec_id = compression.CODEC_IDS[kind]
        out = bytearray(good[:RECORDS_OFFSET]) + compression.compress(codec_id, bytes(section))
        out[ATTRIBUTES_OFFSET + 1] |= codec_id
        return _refit(out)
    if kind == "trailing-byte":
        return _refit(good + b"\0")
    struct.pack_into(">i", good, RECORDS_OFFSET - 4, 101 if kind == "count-too-high" else 99)
    return _refit(good)


@pytest.mark.parametrize("kind", ["gzip", "snappy", "lz4", "zstd", "count-too-high", "count-too-low", "trailing-byte"])
def test_serve_refuses_other_crc_valid_malformed_batches(kafka_server, klog_proc, kind):
    kafka_server.store.create_topic("mal")
    with RawClient(kafka_server.port) as client:
        assert produce(client, "mal", 0, _malformed(kind))[0] == 2  # CORRUPT_MESSAGE
        assert produce(client, "mal", 0, batch([b"sound"]))[0] == 0
    assert klog_proc("consume", "mal").stdout == b"sound\n"


# -- 4. the long-poll watcher --------------------------------------------------------------------
@pytest.mark.slow
def test_a_waiting_confluent_consumer_is_woken_by_a_local_produce_in_another_process(kafka_server, data_dir):
    confluent = pytest.importorskip("confluent_kafka")
    kafka_server.store.create_topic("idle")
    consumer = confluent.Consumer({"bootstrap.servers": kafka_server.bootstrap, "group.id": "w",
                                   "enable.auto.commit": False, "fetch.wait.max.ms": 10_000})
    try:
        consumer.assign([confluent.TopicPartition("idle", 0, 0)])
        assert consumer.poll(1.0) is None  # connected, now long-polling an idle topic
        time.sleep(0.5)
        produced = subprocess.run([sys.executable, "-m", "klog", "produce", "idle"], input=b"hello\n",
                                  env=_env(data_dir), capture_output=True, timeout=60)
        written = time.monotonic()
        assert produced.returncode == 0
        message = None
        deadline = written + 8
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(0.05)
        received = time.time()
    finally:
        consumer.close()
    assert message is not None and message.error() is None and message.value() == b"hello"
    woken = received - message.timestamp()[1] / 1000  # from the append (CreateTime) to the consumer
    assert woken < 2.0, f"woken {woken:.3f} s after the produce ended (the fetch waits up to 10 s)"


def test_a_topic_deleted_while_a_fetch_waits_answers_it_and_the_watcher_goes_idle(kafka_server, data_dir):
    import threading

    from kio.schema.fetch.v12.request import FetchPartition, FetchTopic
    from kio.static.primitive import i32Timedelta

    kafka_server.store.create_topic("doomed")
    part = FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                          log_start_offset=-1, partition_max_bytes=1 << 20)
    fields = dict(replica_id=-1, max_wait=i32Timedelta.parse(datetime.timedelta(seconds=8)), min_bytes=1,
                  max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                  topics=(FetchTopic(topic="doomed", partitions=(part,)),), forgotten_topics_data=(), rack_id="")
    with RawClient(kafka_server.port) as client:
        answers: list = []
        waiter = threading.Thread(target=lambda: answers.append(client.send(1, 12, **fields)))
        waiter.start()
        time.sleep(0.5)
        assert kafka_server.watcher.waiting == 1
        deleted = subprocess.run([sys.executable, "-m", "klog", "topics", "delete", "doomed", "--yes"],
                                 env=_env(data_dir), capture_output=True, timeout=60)
        assert deleted.returncode == 0, deleted.stderr
        gone = time.monotonic()
        waiter.join(8)
        assert answers, "the fetch still waits after its topic was deleted"
        assert time.monotonic() - gone < 3
        assert answers[0].responses[0].partitions[0].error_code != 0
        resp = client.send(3, 9, topics=None, allow_auto_topic_creation=False,
                           include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
        assert "doomed" not in [t.name for t in resp.topics]  # still serving
    polls = kafka_server.watcher.polls
    time.sleep(0.5)
    assert kafka_server.watcher.waiting == 0 and kafka_server.watcher.polls == polls  # not spinning


# -- 5. consume --group --exec and replay's range options ----------------------------------------
def test_consume_group_exec_commits_after_each_success_and_a_failure_is_redone(klog_proc, data_dir, tmp_path):
    assert klog_proc("produce", "jobs", input=b"a\nb\nbad\nc\nd\n").returncode == 0
    out = tmp_path / "out"
    failing = f'v=$(cat); [ "$v" != bad ] && echo "$KLOG_OFFSET $v" >> {out}'
    first = klog_proc("consume", "jobs", "-G", "g", "--exec", failing)
    err = first.stderr.decode()
    assert first.returncode == 1 and "offset 2" in err and "Traceback" not in err
    assert out.read_text().splitlines() == ["0 a", "1 b"]
    (committed,) = json.loads(klog_proc("groups", "describe", "g", "--json").stdout)["partitions"]
    assert (committed["committed"], committed["lag"]) == (2, 3)  # the failed record is not committed

    batched = tmp_path / "batched"
    second = klog_proc("consume", "jobs", "-G", "g", "--batch", "2", "--exec",
                       f'echo "$KLOG_OFFSET:$KLOG_COUNT $(tr "\\n" ,)" >> {batched}')
    assert second.returncode == 0, second.stderr
    assert batched.read_text().splitlines() == ["2:2 bad,c,", "4:1 d,"]  # the failed record first
    third = klog_proc("consume", "jobs", "-G", "g", "--exec", f"cat >> {tmp_path / 'never'}")
    assert third.returncode == 0 and not (tmp_path / "never").exists()  # everything was committed


def test_replay_range_options_to_stdout_and_into_a_topic(klog_proc, data_dir):
    lines = b"".join(b'{"value": "%s", "timestamp": %d}\n' % (v, ts)
                     for v, ts in ((b"a", 1000), (b"b", 2000), (b"c", 3000), (b"d", 4000)))
    assert klog_proc("produce", "src", "--input", "json", input=lines).returncode == 0

    def replay(*args: str) -> list[str]:
        r = klog_proc("replay", "src", *args)
        assert r.returncode == 0, r.stderr
        return r.stdout.decode().splitlines()

    assert replay("--since", "2000", "--until", "4000") == ["b", "c"]  # --until excludes its time
    assert replay("--since", "1970-01-01T00:00:03Z") == ["c", "d"]
    assert replay("-o", "1", "-n", "2") == ["b", "c"]
    assert replay("-o", "-1") == ["d"]
    assert replay("--tail", "2") == ["c", "d"]
    assert replay("--until", "1s") == ["a", "b", "c", "d"]  # a span: that long ago

    both = klog_proc("replay", "src", "-o", "1", "--since", "2000")
    assert both.returncode == 2 and b"use only one of" in both.stderr
    bad = klog_proc("replay", "src", "--since", "yesterday")
    assert bad.returncode == 2 and bad.stderr.decode().count("\n") == 1 and b"invalid time" in bad.stderr

    into = klog_proc("replay", "src", "--to", "dst", "--since", "3000", "--keep-timestamps")
    assert into.returncode == 0, into.stderr
    got = klog_proc("consume", "dst", "-F", "%T %s\n").stdout.decode().splitlines()
    assert got == ["3000 c", "4000 d"]
