"""What a kcat / rpk / Kafka-scripts user types in the first hour: it works, or one line names klog's spelling."""

from __future__ import annotations

import pytest

import klog
from tests.cli.test_cli import assert_one_line_error

# two lines `kcat -C -J` printed (kcat 1.7, through klog serve): payload, ts, a flat header list, raw bytes
KCAT_J = (b'{"topic":"t","partition":0,"offset":0,"tstype":"create","ts":1795922886821,"broker":0,'
          b'"headers":["h","1","h2","x"],"key":"k1","payload":"v1"}\n'
          b'{"topic":"t","partition":0,"offset":1,"tstype":"create","ts":1795922886822,"broker":0,'
          b'"headers":[],"key":null,"payload":"\xff"}\n')


def records(data_dir, topic):
    with klog.open(data_dir) as s:
        return [(r.key, r.value, r.headers, r.timestamp) for r in s.consumer(topic)]


def test_produce_input_json_reads_kcats_envelope(cli, data_dir):
    cli("topics", "create", "c")
    r = cli("produce", "c", "--input", "json", input=KCAT_J)
    assert r.exit_code == 0 and r.stderr == "", r
    assert records(data_dir, "c") == [(b"k1", b"v1", [("h", b"1"), ("h2", b"x")], 1795922886821),
                                      (None, b"\xff", [], 1795922886822)]


def test_produce_input_json_refuses_a_line_without_a_value_or_with_unknown_fields(cli, data_dir):
    cli("topics", "create", "j")
    r = cli("produce", "j", "--input", "json", input=b'{"value": "a"}\n{"a": 1}\n')
    assert_one_line_error(r, 2, "line 2", "unknown field(s) a", "1 records before it were written")
    r = cli("produce", "j", "--input", "json", input=b'{"value": "b"}\n{"key": "k"}\n')
    assert_one_line_error(r, 2, "line 2", 'no "value"', "1 records before it were written")
    r = cli("produce", "j", "--input", "json", input=b'{"value": "x", "payload": "y"}\n')
    assert_one_line_error(r, 2, "line 1", "both value and payload")
    r = cli("produce", "j", "--input", "json", input=b'{"payload": "x", "headers": ["h"]}\n')
    assert_one_line_error(r, 2, "line 1", "the last name has no value")
    for bad in (b'{"value": "x", "headers": [["h"]]}', b'{"value": "x", "headers": [[1, "v"]]}',
                b'{"value": "x", "headers": 5}', b'{"value": "\\ud800"}',
                b'{"value": "x", "headers": [["a", "b"], "c"]}'):
        r = cli("produce", "j", "--input", "json", input=bad + b"\n")
        assert_one_line_error(r, 2, "line 1: malformed JSON input")
        assert "unpack" not in r.stderr and "codec" not in r.stderr and "char " not in r.stderr, r.stderr
    # a tombstone is said so
    assert cli("produce", "j", "--input", "json", input=b'{"key": "k", "value": null}\n').exit_code == 0
    assert [v for _, v, _, _ in records(data_dir, "j")] == [b"a", b"b", None]


def test_produce_key_separator_takes_escapes_as_consume_does(cli, data_dir):
    r = cli("produce", "k", "-K", "\\t", input=b"a\tb\nc\\td\n")
    assert r.exit_code == 0, r
    assert [(k, v) for k, v, _, _ in records(data_dir, "k")] == [(b"a", b"b"), (None, b"c\\td")]
    assert_one_line_error(cli("produce", "k", "-K", "\\x", input=b"a\n"), 2, "invalid -K '\\x'")


def test_produce_takes_kafkas_spellings_of_its_settings(cli, data_dir):
    cli("topics", "create", "p")
    r = cli("produce", "-t", "p", "--acks", "-1", "-X", "linger.ms=5", "-X", "acks=all", "-X", "compression.type=gzip",
            "-X", "batch.size=16384", input=b"one\n")
    assert r.exit_code == 0, r
    assert cli("produce", "--topic", "p", input=b"two\n").exit_code == 0
    assert [v for _, v, _, _ in records(data_dir, "p")] == [b"one", b"two"]
    assert_one_line_error(cli("produce", "p", "-X", "parse.key=true", input=b"a\n"), 2,
                          "-X parse.key is kafka-console-producer's", "-K SEP")
    assert_one_line_error(cli("produce", "p", "-X", "linger.ms=soon", input=b"a\n"), 2, "linger.ms must be")
    assert_one_line_error(cli("produce", "p", "-X", "nope=1", input=b"a\n"), 2, "unknown producer setting 'nope'",
                          "linger.ms", "acks")
    assert_one_line_error(cli("produce", "p", "--linger-ms", "3", "-X", "linger.ms=5", input=b"a\n"), 2, "disagree")
    assert_one_line_error(cli("produce", input=b"a\n"), 2, "give a topic")


def test_a_topic_config_that_is_not_a_number_names_the_key_and_what_it_takes(cli):
    r = cli("topics", "create", "t3", "-c", "retention.ms=abc")
    assert_one_line_error(r, 2, "invalid value 'abc' for retention.ms: must be an integer, at least -1")
    r = cli("topics", "create", "t3", "-c", "min.cleanable.dirty.ratio=half")
    assert_one_line_error(r, 2, "min.cleanable.dirty.ratio: must be a number between 0 and 1")
    r = cli("topics", "create", "t3", "-c", "segment.bytes=1e9")
    assert_one_line_error(r, 2, "segment.bytes: must be an integer")
    assert "int()" not in r.stderr and "literal" not in r.stderr


def test_consume_format_json_is_json_and_a_format_without_tokens_is_refused(cli):
    cli("produce", "f", "-K", ":", input=b"k:v\n")
    r = cli("consume", "f", "--format", "json")
    assert r.exit_code == 0 and r.stdout.startswith(b'{"topic": "f", "partition": 0, "offset": 0'), r
    assert r.stdout == cli("consume", "f", "--json").stdout
    for fmt in ("raw", "\\n", "%%"):
        assert_one_line_error(cli("consume", "f", "--format", fmt), 2, f"--format '{fmt}' has no %-token",
                              "%k %s", "--json")
    assert cli("consume", "f", "-F", "%k=%s\\n").stdout == b"k=v\n"


def test_consume_takes_or_names_the_other_tools_spellings(cli, data_dir):
    lines = b"".join(b'{"key": "k%d", "value": "v%d", "timestamp": %d}\n' % (i, i, i * 1000) for i in (1, 2, 3))
    assert cli("produce", "o", "--input", "json", input=lines).exit_code == 0
    assert cli("consume", "o", "-o", "s@2000").stdout == b"v2\nv3\n"  # kcat's -o s@TS: --since TS
    assert cli("consume", "o", "-o", "e@2000").stdout == b"v1\n"  # kcat's -o e@TS: --until TS
    assert_one_line_error(cli("consume", "o", "-o", "s@1", "--since", "2"), 2, "-o s@1 is kcat's spelling of --since")
    assert_one_line_error(cli("consume", "o", "-o", ""), 2, "invalid offset ''")
    assert_one_line_error(cli("consume", "o", "-f", "%k %s\\n"), 2, "kcat's -f FMT is klog's -F FMT")
    assert_one_line_error(cli("consume", "o", "--property", "print.key=true"), 2,
                          "--property print.key is kafka-console-consumer's", "--format")
    assert cli("consume", "o", "--from-beginning").stdout == b"v1\nv2\nv3\n"
    assert_one_line_error(cli("consume", "o", "--from-beginning", "-o", "end"), 2, "disagree")
    # -o start works with a group as it does alone; --from-beginning is where a new group starts
    assert cli("consume", "o", "-G", "g1", "-o", "start", "-n", "1").stdout == b"v1\n"
    assert cli("consume", "o", "-G", "g2", "--from-beginning", "-n", "1").stdout == b"v1\n"
    assert cli("consume", "o", "-G", "g3", "--from-beginning", "-o", "earliest", "-n", "1").stdout == b"v1\n"
    assert_one_line_error(cli("consume", "o", "-G", "g4", "-o", "s@1"), 2, "with --group, --offset takes")


def test_groups_reset_offsets_takes_kafkas_dry_run_and_iso_durations(cli):
    cli("produce", "r", input=b"a\nb\n")
    cli("consume", "r", "-G", "g")
    r = cli("groups", "reset-offsets", "g", "--topic", "r", "--by-duration", "PT1H", "--dry-run")
    assert r.exit_code == 0 and "dry run: nothing changed" in r.stderr, r
    assert r.stdout.split(b"\n")[1].split()[:5] == [b"g", b"r", b"0", b"2", b"0"]
    assert_one_line_error(cli("groups", "reset-offsets", "g", "--topic", "r", "--by-duration", "P1DT"), 2,
                          "invalid duration 'P1DT'", "PT1H")
    assert_one_line_error(cli("groups", "reset-offsets", "g", "--topic", "r", "--to-earliest", "--dry-run",
                              "--execute"), 2, "--dry-run or --execute")


WORKER_PROPERTIES = ("bootstrap.servers=localhost:9092\n"
                     "key.converter=org.apache.kafka.connect.storage.StringConverter\n"
                     "value.converter=org.apache.kafka.connect.storage.StringConverter\nplugin.path=/usr/share/java\n"
                     "offset.storage.file.filename=/tmp/connect.offsets\nkey.converter.schemas.enable=false\n"
                     "producer.linger.ms=5\noffset.flush.interval.ms=1000\n")


def test_connect_run_names_the_worker_keys_it_ignores_and_the_file_of_an_error(cli, tmp_path):
    worker = tmp_path / "worker.properties"
    worker.write_text(WORKER_PROPERTIES)
    source = tmp_path / "src.properties"
    source.write_text(f"name=src\nconnector.class=FileStreamSource\nfile={tmp_path / 'in.txt'}\ntopic=ct\n")
    bad = tmp_path / "bad.properties"
    bad.write_text("name=bad\nconnector.class=FileStreamSource\n")
    # connect-standalone's habit: the worker's properties first
    r = cli("connect", "run", str(worker), str(source), "--listen", "none")
    assert_one_line_error(r, 2, f"{worker} looks like a worker's properties", "use -w/--worker-config")
    # several connector configs: the error names the file
    r = cli("connect", "run", str(source), str(bad), "--listen", "none")
    assert_one_line_error(r, 2, f"{bad}: missing required configuration topic")
    # the worker's keys klog does not read: one warning naming them (before the connector's error)
    r = cli("connect", "run", "-w", str(worker), str(bad), "--listen", "none")
    assert r.exit_code == 2, r
    warning, error = r.stderr.splitlines()
    assert warning == (f"klog: warning: worker config {worker}: klog does not use these keys and ignores them: "
                       "bootstrap.servers, offset.storage.file.filename, plugin.path (klog's workers use the local "
                       "store, or the cluster given with -b/--bootstrap-server)")
    assert error == "klog: error: missing required configuration topic: the topic to write to"


def test_produce_help_shows_what_schema_takes_and_the_bracketed_prefixes(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    text = " ".join(cli("produce", "--help").stdout.decode().split())
    assert "--schema FILE|id:N|latest" in text and "DDL" not in text, text
    assert "With -s: [key=|value=]FILE (an Avro" in text  # Rich took [key=|value=] for a markup tag
    assert "serializers do: [key=|value=]avro|json|protobuf" in text
    spark = " ".join(cli("spark", "export", "--help").stdout.decode().split())
    assert "--schema DDL" in spark


def test_topic_creation_notes_have_one_style_and_completion_installs_as_klog(cli, tmp_path, monkeypatch):
    assert cli("topics", "create", "a").stderr == "klog: created topic 'a' (1 partition, replication factor 1)\n"
    assert cli("produce", "b", input=b"x\n").stderr == "klog: created topic 'b' with the store's defaults\n"
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SHELL", "/bin/bash")
    with pytest.raises(SystemExit) as done:  # (Typer's completion callback exits the process)
        cli("--install-completion", "bash")
    assert done.value.code == 0
    script = tmp_path / ".bash_completions" / "klog.sh"
    assert script.exists(), list((tmp_path / ".bash_completions").iterdir())
    assert "_KLOG_COMPLETE=complete_bash" in script.read_text()


def test_console_tools_properties_name_klogs_spelling_with_a_cluster_too(cli, monkeypatch):
    monkeypatch.setenv("KLOG_CLUSTER_TIMEOUT", "2")  # (refused before any connection)
    assert_one_line_error(cli("produce", "t", "-b", "127.0.0.1:9", "-X", "parse.key=true", input=b"a\n"), 2,
                          "-X parse.key is kafka-console-producer's", "-K SEP")
    for group in ([], ["-G", "g"]):
        assert_one_line_error(cli("consume", "t", "-b", "127.0.0.1:9", *group, "--property", "print.key=true"), 2,
                              "--property print.key is kafka-console-consumer's", "--format")
