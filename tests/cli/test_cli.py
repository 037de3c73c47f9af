"""The klog command as a user sees it: output, exit codes and one-line errors, with each effect
checked again through the Python API (sqlite-utils' habit)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import klog
from klog.client.partitioner import partition_for_key
from tests.conftest import REPO


def values(data_dir, topic):
    with klog.open(data_dir) as s:
        return [r.value for r in s.consumer(topic)]


# -- produce / consume ---------------------------------------------------------------------------
def test_lines_round_trip_and_auto_create_note(cli, data_dir):
    r = cli("produce", "t", input=b"a\nb\nc\n")
    assert r.exit_code == 0 and r.stdout == b""
    assert "created topic 't'" in r.stderr
    assert values(data_dir, "t") == [b"a", b"b", b"c"]
    r = cli("consume", "t")
    assert (r.exit_code, r.stdout) == (0, b"a\nb\nc\n")


def test_key_separator_uses_kafkas_partitioner(cli, data_dir):
    assert cli("topics", "create", "k", "--partitions", "6").exit_code == 0
    lines = b"".join(b"user-%d:v%d\n" % (i, i) for i in range(50))
    assert cli("produce", "k", "-K", ":", input=lines).exit_code == 0
    with klog.open(data_dir) as s:
        recs = list(s.consumer("k"))
    assert len(recs) == 50
    for rec in recs:
        assert rec.partition == partition_for_key(rec.key, 6)
        assert rec.value == b"v" + rec.key.split(b"-")[1]


def test_headers_partition_and_print_offsets(cli, data_dir):
    cli("topics", "create", "h", "-p", "2")
    r = cli("produce", "h", "-p", "1", "-H", "src=cli", "-H", "v=2", "--print-offsets", input=b"x\ny\n")
    assert r.out.splitlines() == ["h\t1\t0", "h\t1\t1"]
    with klog.open(data_dir) as s:
        recs = list(s.consumer("h"))
    assert [(x.partition, x.offset, x.headers) for x in recs] == [
        (1, 0, [("src", b"cli"), ("v", b"2")]), (1, 1, [("src", b"cli"), ("v", b"2")])]


def test_json_envelope_round_trip_is_lossless(cli, data_dir, store):
    store.create_topic("src", partitions=2)
    with store.producer() as p:
        p.send("src", b"\xff\x00binary", key=b"\x80key", headers=[("h", b"\xfe"), ("n", None)], timestamp=1000)
        p.send("src", None, key=b"tomb", timestamp=2000)
        p.send("src", "ünïcode".encode(), key=None, timestamp=3000, partition=1)
    out = cli("consume", "src", "--json").stdout
    docs = [json.loads(line) for line in out.splitlines()]
    assert docs[0]["key"] == {"base64": "gGtleQ=="} and docs[1]["value"] is None
    store.create_topic("dst", partitions=2)
    assert cli("produce", "dst", "--input", "json", input=out).exit_code == 0
    copy = cli("consume", "dst", "--json").stdout
    strip = [{k: v for k, v in json.loads(line).items() if k not in ("topic",)} for line in copy.splitlines()]
    assert strip == [{k: v for k, v in d.items() if k != "topic"} for d in docs]


def test_raw_input_is_one_record(cli, data_dir):
    assert cli("produce", "raw", "--input", "raw", input=b"line1\nline2\n").exit_code == 0
    assert values(data_dir, "raw") == [b"line1\nline2\n"]


def test_non_utf8_input_is_stored_as_bytes(cli, data_dir):
    assert cli("produce", "bin", input=b"\xff\xfe\n\xc3(\n").exit_code == 0
    assert values(data_dir, "bin") == [b"\xff\xfe", b"\xc3("]


def test_offset_tail_count_and_partition_options(cli, data_dir):
    cli("topics", "create", "o", "-p", "2")
    cli("produce", "o", "-p", "0", input=b"".join(b"%d\n" % i for i in range(10)))
    cli("produce", "o", "-p", "1", input=b"p1\n")
    assert cli("consume", "o", "-p", "0", "-o", "7").out == "7\n8\n9\n"
    assert cli("consume", "o", "-p", "0", "-o", "-2").out == "8\n9\n"
    assert cli("consume", "o", "-p", "0", "-o", "end").out == ""
    assert cli("consume", "o", "--tail", "1").out.split() in (["9", "p1"], ["p1", "9"])
    assert cli("consume", "o", "-p", "0", "-n", "3").out == "0\n1\n2\n"


def test_since_until_and_merge_in_timestamp_order(cli, store):
    store.create_topic("ts", partitions=2)
    with store.producer() as p:
        for i, ts in enumerate([1000, 3000, 5000]):
            p.send("ts", b"a%d" % i, partition=0, timestamp=ts)
        for i, ts in enumerate([2000, 4000]):
            p.send("ts", b"b%d" % i, partition=1, timestamp=ts)
    assert cli("consume", "ts").out.split() == ["a0", "b0", "a1", "b1", "a2"]
    assert cli("consume", "ts", "--since", "2500", "--until", "5000").out.split() == ["a1", "b1"]
    assert cli("consume", "ts", "--since", "1970-01-01T00:00:04Z").out.split() == ["b1", "a2"]


def test_format_tokens_and_grep(cli, store):
    with store.producer() as p:
        p.send("f", b"hello", key=b"k1", headers=[("a", b"1")], timestamp=1700000000000)
        p.send("f", b"other", key=None, timestamp=1700000000001)
    r = cli("consume", "f", "--format", r"%t|%p|%o|%k|%s|%K|%S|%h|%T|%I\n")
    assert r.out.splitlines() == ["f|0|0|k1|hello|2|5|a=1|1700000000000|2023-11-14T22:13:20.000Z",
                                  "f|0|1||other|-1|5||1700000000001|2023-11-14T22:13:20.001Z"]
    assert cli("consume", "f", "--grep", "^oth").out == "other\n"


# -- topics ---------------------------------------------------------------------------------------
def test_topics_lifecycle_json(cli):
    assert cli("topics", "create", "life", "-p", "2", "-c", "retention.ms=1000", "--json").exit_code == 0
    assert cli("topics", "alter", "life", "-p", "4", "-c", "segment.bytes=100000").exit_code == 0
    cli("produce", "life", "-p", "3", input=b"x\n")
    desc = json.loads(cli("topics", "describe", "life", "--json").stdout)
    assert len(desc["partitions"]) == 4
    assert desc["configs"] == {"retention.ms": "1000", "segment.bytes": "100000"}
    p3 = desc["partitions"][3]
    assert (p3["high_watermark"], p3["log_end_offset"], p3["segments"], p3["isr"]) == (1, 1, 1, [0])
    listed = [json.loads(x) for x in cli("topics", "list", "--json").stdout.splitlines()]
    assert listed == [{"topic": "life", "partitions": 4, "replication_factor": 1, "offsets": 1,
                       "size_bytes": desc["partitions"][3]["size_bytes"]}]
    assert cli("topics", "alter", "life", "--delete-config", "retention.ms").exit_code == 0
    assert json.loads(cli("topics", "describe", "life", "--json").stdout)["configs"] == {"segment.bytes": "100000"}
    assert cli("topics", "delete", "life", "--yes").exit_code == 0
    assert cli("topics", "list", "--json").stdout == b""


def test_offsets_command(cli, store):
    with store.producer() as p:
        for ts in (1000, 2000, 3000):
            p.send("off", b"x", timestamp=ts)
    rows = [json.loads(x) for x in cli("offsets", "off", "--time", "1500", "--json").stdout.splitlines()]
    assert rows == [{"topic": "off", "partition": 0, "earliest": 0, "latest": 3, "offset": 1}]


# -- bad input: one line, right exit code, no traceback ---------------------------------------------
def assert_one_line_error(r, code, *fragments):
    assert r.exit_code == code, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


def test_unknown_topic_for_consume(cli):
    cli("produce", "exists", input=b"x\n")
    assert_one_line_error(cli("consume", "nope"), 1, "unknown topic 'nope'")


def test_invalid_topic_names(cli):
    assert_one_line_error(cli("topics", "create", "../evil"), 2, "illegal characters")
    assert_one_line_error(cli("produce", "a b", input=b"x\n"), 2, "illegal characters")
    assert_one_line_error(cli("topics", "create", ".."), 2, "not allowed")
    assert_one_line_error(cli("topics", "create", "x" * 250), 2, "250 characters")
    cli("topics", "create", "a.b")
    assert_one_line_error(cli("topics", "create", "a_b"), 2, "collides with existing topic 'a.b'")


def test_usage_errors_are_one_line_with_exit_2(cli):
    assert_one_line_error(cli("consume", "t", "--bogus"), 2, "No such option: --bogus")
    assert_one_line_error(cli("topics", "create"), 2, "Missing argument 'TOPIC'")
    assert_one_line_error(cli("frobnicate"), 2, "No such command 'frobnicate'")
    assert_one_line_error(cli("consume", "t", "-o"), 2, "'-o' requires an argument")
    bare = cli()
    assert bare.exit_code == 2 and b"Commands" in bare.stdout  # bare `klog` shows help


def test_bad_offset_and_time_specs(cli):
    cli("produce", "t", input=b"x\n")
    assert_one_line_error(cli("consume", "t", "-o", "soon"), 2, "invalid offset 'soon'")
    assert_one_line_error(cli("consume", "t", "--since", "yesterday-ish"), 2, "invalid time 'yesterday-ish'")
    assert_one_line_error(cli("topics", "create", "c", "-c", "retention.ms=abc"), 2, "retention.ms")
    assert_one_line_error(cli("topics", "create", "c", "-c", "no.such=1"), 2, "unknown topic config 'no.such'")


def test_oversized_record_names_line_and_keeps_earlier_records(cli, data_dir):
    cli("topics", "create", "big", "-c", "max.message.bytes=200")
    r = cli("produce", "big", input=b"ok1\nok2\n" + b"x" * 500 + b"\nafter\n")
    assert_one_line_error(r, 1, "line 3", "max.message.bytes", "2 records before it were written")
    assert values(data_dir, "big") == [b"ok1", b"ok2"]


def test_malformed_json_names_line(cli, data_dir):
    cli("topics", "create", "j")
    r = cli("produce", "j", "--input", "json", input=b'{"value": "a"}\n{not json\n')
    assert_one_line_error(r, 2, "line 2", "malformed JSON", "1 records before it were written")
    assert values(data_dir, "j") == [b"a"]
    bad_fields = [
        (b'{"value":"b","partition":"x"}', 'partition "x" is not a partition number'),
        (b'{"value":"b","partition":1.5}', "partition 1.5 is not a partition number"),
        (b'{"value":"b","partition":true}', "partition true is not a partition number"),
        (b'{"value":"b","partition":-1}', "partition -1 is not a partition number"),
        (b'{"value":"b","timestamp":99999999999999999999}', "timestamp 99999999999999999999 is not epoch"),
        (b'{"value":"b","timestamp":true}', "timestamp true is not epoch milliseconds"),
        (b'{"value":"b","timestamp":-5}', "timestamp -5 is not epoch milliseconds"),
        (b'{"value":"b","timestamp":1.5e12}', "timestamp 1500000000000.0 is not epoch milliseconds"),
    ]
    for line, message in bad_fields:
        r = cli("produce", "j", "--input", "json", input=b'{"value": "ok"}\n' + line + b"\n")
        assert_one_line_error(r, 2, "line 2: malformed JSON input", message, "1 records before it were written")
    # a partition the topic lacks: the record still lands (the partitioner chooses), with one warning
    r = cli("produce", "j", "--input", "json",
            input=b'{"value": "ok"}\n{"value":"b","partition":9}\n{"value":"c","partition":9}\n')
    assert r.exit_code == 0
    assert r.stderr.splitlines() == ["klog: warning: line 2: topic 'j' has no partition 9 (it has 1): its records go "
                                     "where the partitioner puts them (create the topic with enough partitions "
                                     "first, or pass -p, to choose)"]
    assert values(data_dir, "j") == [b"a"] + [b"ok"] * (len(bad_fields) + 1) + [b"b", b"c"]
    # the edges that are fine: the int64 range, Kafka's -1 (no timestamp), null (now), partition 0
    edges = b'{"value":"e1","timestamp":0,"partition":0}\n{"value":"e2","timestamp":9223372036854775807}\n' \
            b'{"value":"e3","timestamp":-1}\n{"value":"e4","timestamp":null,"partition":null}\n'
    assert cli("produce", "j", "--input", "json", input=edges).exit_code == 0
    with klog.open(data_dir) as s:
        got = [(r.value, r.timestamp) for r in s.consumer("j")][-4:]
    assert got[:3] == [(b"e1", 0), (b"e2", 2**63 - 1), (b"e3", -1)] and got[3][1] > 1_600_000_000_000


def test_unwritable_data_dir(cli, tmp_path):
    # a data directory under a regular file cannot be created, whoever runs klog (root too)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    under_file = str(blocker / "store")
    for args in (("topics", "create", "t"), ("produce", "t"), ("dirs", "add", str(tmp_path / "disk2"))):
        r = cli(*args, "--data-dir", under_file, input=b"x\n")
        assert_one_line_error(r, 1, "cannot create data directory", "Not a directory")
    assert_one_line_error(cli("topics", "list", "--data-dir", under_file), 1, f"no klog store at {under_file}")
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):  # root ignores permissions: the file case above covers root
            return
        r = cli("topics", "create", "t", "--data-dir", str(locked / "store"))
        assert_one_line_error(r, 1, "cannot create data directory")
    finally:
        locked.chmod(0o700)


def test_read_only_commands_never_create_a_store(cli, tmp_path):
    missing = str(tmp_path / "typo" / "store")
    for args in (("topics", "list"), ("topics", "describe", "t"), ("topics", "delete", "t", "--yes"),
                 ("topics", "alter", "t", "-p", "2"), ("dirs", "list"), ("dirs", "remove", "0"),
                 ("topics", "clean"), ("offsets", "t"), ("consume", "t"), ("dump", "t")):
        r = cli(*args, "--data-dir", missing)
        assert_one_line_error(r, 1, f"no klog store at {missing}")
        assert not os.path.exists(tmp_path / "typo"), args
    assert cli("topics", "create", "t", "--data-dir", missing).exit_code == 0  # what creates, creates
    assert os.path.exists(os.path.join(missing, "klog.json"))


def test_consume_on_missing_store_is_an_error(cli, tmp_path):
    assert_one_line_error(cli("consume", "t", "--data-dir", str(tmp_path / "none")), 1, "no klog store")


# -- real processes: pipes and signals --------------------------------------------------------------
@pytest.mark.slow
def test_closed_pipe_exits_quietly(klog_proc, data_dir):
    klog_proc("produce", "p", input=b"".join(b"line %d\n" % i for i in range(200_000)))
    env = {**os.environ, "KLOG_DATA_DIR": data_dir}
    cmd = f"{sys.executable} -m klog consume p | head -1"
    out = subprocess.run(["bash", "-c", "set -o pipefail; " + cmd], capture_output=True, env=env, timeout=60,
                         cwd=REPO)
    assert out.stdout == b"line 0\n"
    assert out.stderr == b""
    assert out.returncode == 0  # klog's own status (pipefail): a reader leaving is not a failure
    for args in ("consume p --json", "consume p --format '%o %s\\n'", "dump p", "dump p --json"):
        cmd = f"{sys.executable} -m klog {args} | head -1"
        out = subprocess.run(["bash", "-c", "set -o pipefail; " + cmd], capture_output=True, env=env, timeout=60,
                             cwd=REPO)
        assert (out.returncode, out.stderr, out.stdout.count(b"\n")) == (0, b"", 1), (args, out)


def test_ctrl_c_during_produce_keeps_acknowledged_records(data_dir):
    env = {**os.environ, "KLOG_DATA_DIR": data_dir}
    # a runner that started us in the background may have SIGINT ignored; a user's shell does not
    proc = subprocess.Popen([sys.executable, "-m", "klog", "produce", "sig"], stdin=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=REPO,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    proc.stdin.write(b"one\ntwo\n")
    proc.stdin.flush()
    deadline = time.time() + 20
    while time.time() < deadline:  # wait until the two lines are visible to readers
        if os.path.exists(os.path.join(data_dir, "klog.json")):
            with klog.open(data_dir) as s:
                if s.has_topic("sig") and len(list(s.consumer("sig"))) == 2:
                    break
        time.sleep(0.05)
    proc.stdin.write(b"partial-without-newline")
    proc.stdin.flush()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130
    assert b"Traceback" not in err
    assert values(data_dir, "sig") == [b"one", b"two"]


@pytest.mark.slow
def test_follow_sees_new_records(data_dir, klog_proc):
    klog_proc("topics", "create", "live")
    env = {**os.environ, "KLOG_DATA_DIR": data_dir}
    proc = subprocess.Popen([sys.executable, "-m", "klog", "consume", "live", "-f", "-n", "2"],
                            stdout=subprocess.PIPE, env=env, cwd=REPO)
    time.sleep(1.0)
    klog_proc("produce", "live", input=b"first\nsecond\n")
    out, _ = proc.communicate(timeout=20)
    assert out == b"first\nsecond\n" and proc.returncode == 0


# -- dump ----------------------------------------------------------------------------------------
def test_dump_by_name_file_and_folder(cli, store, data_dir):
    cli("topics", "create", "d", "-p", "2")
    cli("produce", "d", "-p", "1", "-K", ":", "-H", "src=cli", input=b"k1:v1\nk2:\xff\n")
    lines = [json.loads(x) for x in cli("dump", "d-1", "--json").stdout.splitlines()]
    kinds = [x["type"] for x in lines]
    assert kinds == ["segment", "batch", "record", "record"]
    segment, batch, *records = lines
    assert segment["path"].endswith(os.path.join("d-1", "00000000000000000000.log"))
    assert batch["base_offset"] == 0 and batch["last_offset"] == 1 and batch["valid"] is True
    assert [(r["offset"], r["key"], r["value"]) for r in records] == [(0, "k1", "v1"), (1, "k2", {"base64": "/w=="})]
    assert records[0]["headers"] == [["src", "cli"]]
    # the same segment by its file path, batches only, in kafka-dump-log's words
    text = cli("dump", segment["path"], "--batches").stdout.decode()
    assert "baseOffset: 0 lastOffset: 1 count: 2" in text and "isvalid: true" in text and "payload" not in text
    # a whole topic: only partitions that have a folder
    assert cli("dump", "d", "--json").stdout.count(b'"type": "segment"') == 1
    # damage a record byte: the batch is reported invalid, its records are not decoded
    with open(segment["path"], "r+b") as f:
        f.seek(batch["size"] - 3)
        f.write(b"\x00\x00")
    damaged = [json.loads(x) for x in cli("dump", "d-1", "--json").stdout.splitlines()]
    assert [x["type"] for x in damaged] == ["segment", "batch"] and damaged[1]["valid"] is False
    assert_one_line_error(cli("dump", "d-7"), 1, "topic 'd' has no partition 7")
    assert_one_line_error(cli("dump", "zz-1"), 2, "'zz-1' is neither a file")
