"""A newcomer's first hour with klog (issue 25): what a kcat user types works, and says the truth."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import klog
from tests.cli.test_cli import assert_one_line_error
from tests.conftest import REPO


def records(data_dir, topic):
    with klog.open(data_dir) as s:
        return list(s.consumer(topic))


def test_raw_input_keeps_the_key(cli, data_dir):
    r = cli("produce", "t", "--input", "raw", "-k", "mykey", "-H", "h=1", input=b"hello")
    assert r.exit_code == 0, r
    [rec] = records(data_dir, "t")
    assert (rec.key, rec.value, rec.headers) == (b"mykey", b"hello", [("h", b"1")])


def test_produce_to_a_cluster_says_the_cluster_created_the_topic(kafka_server, klog_proc):
    r = klog_proc("produce", "fresh", "-b", kafka_server.bootstrap, input=b"x\n")
    assert r.returncode == 0, r.stderr
    line = r.stderr.decode().strip()
    assert "created by the cluster" in line and "store's defaults" not in line, line


def test_options_of_every_command_work_before_the_command(cli, tmp_path):
    other = str(tmp_path / "other")
    assert cli("--data-dir", other, "produce", "t", input=b"a\n").exit_code == 0
    r = cli("--data-dir", other, "topics", "list", "--json")
    assert r.exit_code == 0 and json.loads(r.out)["topic"] == "t", r
    assert cli("-d", other, "consume", "t").stdout == b"a\n"
    assert cli(f"--data-dir={other}", "consume", "t").stdout == b"a\n"
    assert cli("topics", "list", "--json").stdout == b""  # the default store (KLOG_DATA_DIR) has nothing


def test_options_work_before_every_group_of_subcommands(cli, tmp_path):
    """`klog --data-dir X transactions list` was left as `transactions --data-dir X list` (exit 2)."""
    from klog.cli import argv, gendocs

    groups = {name for name, cmd in gendocs.cli_command().commands.items() if getattr(cmd, "commands", None)}
    assert argv.GROUPS == groups
    other = str(tmp_path / "other")
    assert cli("--data-dir", other, "produce", "t", input=b"a\n").exit_code == 0
    r = cli("--data-dir", other, "transactions", "list", "--json")
    assert r.exit_code == 0, r


def test_cluster_options_work_before_the_command(cli):
    r = cli("-b", "127.0.0.1:1", "-X", "client.id=me", "topics", "list")
    assert_one_line_error(r, 1, "cannot reach Kafka cluster", "127.0.0.1:1")
    r = cli("--cluster", "nosuch", "consume", "t")
    assert_one_line_error(r, 2, "nosuch")


# -- kcat habits ---------------------------------------------------------------------------------
def test_kcat_consume_flags(cli):
    assert cli("produce", "t", "-K", ":", input=b"k1:a\nk2:b\nk3:c\n").exit_code == 0
    assert cli("consume", "-t", "t", "-c", "2", "-e", "-q").stdout == b"a\nb\n"
    assert cli("consume", "t", "-K", "\\t", "-c", "1").stdout == b"k1\ta\n"
    assert json.loads(cli("consume", "t", "-J", "-c", "1").out)["key"] == "k1"
    assert_one_line_error(cli("consume", "t", "-e", "-f"), 2, "-e", "-f")
    assert_one_line_error(cli("consume", "t", "-K", ":", "--format", "%s"), 2, "--format")


def test_nul_separated_data_reads_back_nul_separated(cli):
    assert cli("produce", "t", "-D", "\\0", input=b"one\nline\x00two\x00").exit_code == 0
    assert cli("consume", "t", "-D", "\\0").stdout == b"one\nline\x00two\x00"
    assert cli("consume", "t", "--format", "%s\\0").stdout == b"one\nline\x00two\x00"
    assert cli("consume", "t", "--format", "%o\\x1e%s\\r\\n", "-c", "1").stdout == b"0\x1eone\nline\r\n"
    assert cli("consume", "t", "--format", "\\\\%s\\n", "-c", "1").stdout == b"\\one\nline\n"


# -- --last with --grep: grep | tail -n -------------------------------------------------------------
def test_last_with_grep_shows_the_last_matches_of_the_topic(cli, monkeypatch):
    from klog.client import newest

    monkeypatch.setattr(newest, "FIRST_WINDOW", 16)  # several windows back from the end
    lines = b"".join(b"match-%d\n" % i if i % 50 == 0 else b"noise-%d\n" % i for i in range(1000))
    assert cli("topics", "create", "t", "--partitions", "1").exit_code == 0
    assert cli("produce", "t", input=lines).exit_code == 0
    r = cli("consume", "t", "--last", "3", "--grep", "match")
    assert (r.exit_code, r.stdout) == (0, b"match-850\nmatch-900\nmatch-950\n")
    r = cli("consume", "t", "--last", "50", "--grep", "match-[12]")
    assert r.stdout == b"match-100\nmatch-150\nmatch-200\nmatch-250\n"  # fewer matches than asked: all of them
    assert cli("consume", "t", "--last", "2", "--grep", "nothing").stdout == b""


def test_last_with_grep_across_partitions_is_in_time_order(cli):
    assert cli("topics", "create", "t", "--partitions", "3").exit_code == 0
    for i in range(30):
        line = b"hit-%d\n" % i if i % 4 == 0 else b"miss-%d\n" % i
        assert cli("produce", "t", "-p", str(i % 3), input=line).exit_code == 0
    r = cli("consume", "t", "--last", "4", "--grep", "hit")
    assert r.stdout == b"hit-16\nhit-20\nhit-24\nhit-28\n"


# -- help text ----------------------------------------------------------------------------------------
def test_help_paragraphs_have_no_hard_line_breaks():
    from klog.cli import gendocs

    for path, cmd in gendocs.walk_commands(gendocs.cli_command()):
        for paragraph in (cmd.help or "").split("\n\n"):
            assert "\n" not in paragraph, f"`{path}` help breaks a line mid-paragraph: {paragraph!r}"


def test_replay_help_names_its_arguments_as_they_are_spelled(klog_proc):
    r = klog_proc("replay", "--help")
    text = r.stdout.decode()
    assert r.returncode == 0 and "SOURCE into the topic --to names" in text
    assert "SRC" not in text and "DEST" not in text


def run_on_terminal(args: list[str], data_dir: str, columns: int = 80) -> str:
    """`klog ARGS` with stdout on a pseudo-terminal `columns` wide; what it printed."""
    import fcntl
    import pty
    import struct
    import termios

    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO, "NO_COLOR": "1"}
    env.pop("COLUMNS", None)
    proc = subprocess.run([sys.executable, "-m", "klog", *args], stdout=child, stderr=subprocess.PIPE, env=env,
                          timeout=60)
    os.close(child)
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the terminal's other end is closed and drained
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    assert proc.returncode == 0, proc.stderr
    return out.decode().replace("\r\n", "\n")


def test_topics_describe_at_80_columns_wraps_between_fields(cli, data_dir):
    name = "orders-from-the-eu-west-shop"
    assert cli("topics", "create", name, "-c", "retention.ms=3600000", "-c", "cleanup.policy=compact",
               "-c", "max.message.bytes=2000000", "-c", "segment.bytes=1048576").exit_code == 0
    lines = run_on_terminal(["topics", "describe", name], data_dir).splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert lines[0].startswith(f"Topic {name}  id ") and lines[1] == "partitions 1  replication factor 1", lines
    assert lines[2].startswith("Configs: cleanup.policy=compact,") and lines[3].endswith("segment.bytes=1048576"), lines


KCAT_FLAGS = [
    ["-c", "3", "-e", "-q"],
    ["-K", "\\t", "-e", "-q"],
    ["-o", "-2", "-e", "-q", "-K", ":"],
    ["-D", "|", "-e", "-q", "-c", "4"],  # (kcat itself fails to write a NUL -D: \\0 is checked above)
]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
@pytest.mark.parametrize("flags", KCAT_FLAGS, ids=" ".join)
def test_kcat_flags_print_what_kcat_prints(kafka_server, cli, flags):
    """kcat (through klog serve) and klog consume, given the same consume flags, print the same bytes."""
    assert cli("produce", "t", "-K", ":", input=b"k1:a\nk2:b\nk3:line\\nwith\nk4:d\nk5:e\n").exit_code == 0
    theirs = subprocess.run(["kcat", "-b", kafka_server.bootstrap, "-C", "-t", "t", *flags], capture_output=True,
                            timeout=30)
    assert theirs.returncode == 0, theirs.stderr
    ours = cli("consume", "-t", "t", *flags)
    assert (ours.exit_code, ours.stdout) == (0, theirs.stdout)
