"""Edges a user meets: bad inputs, the terminal view, the delete prompt, time specs, store defaults.
Every error is one line with the right exit code (the test_cli.py habit)."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest
from test_cli import assert_one_line_error

import klog
from klog.cli.view import TerminalView
from klog.client.records import Record
from klog.client.timespec import parse_time_ms
from klog.errors import UsageError
from tests.conftest import REPO
from tests.klog_processes import run_klog


# -- the producer API ----------------------------------------------------------------------------
def test_producer_refuses_timestamps_and_partitions_it_cannot_store(store):
    store.create_topic("api", partitions=2)
    with store.producer() as p:
        for bad in (10**20, 2**63, -5, True, 1.5, "1000"):
            with pytest.raises(UsageError, match=r"invalid timestamp .*epoch milliseconds"):
                p.send("api", b"x", timestamp=bad)
            with pytest.raises(UsageError, match="invalid timestamp"):
                p.send_values("api", [b"x"], timestamp=bad)
        for bad in (True, 1.5, "1"):
            with pytest.raises(UsageError, match="invalid partition"):
                p.send("api", b"x", partition=bad)
        with pytest.raises(UsageError, match=r"topic 'api' has no partition 2 \(it has 2\)"):
            p.send("api", b"x", partition=2)
        # both ends of the range in one batch: the int64 timestamp delta must not wrap around
        p.send("api", b"none", timestamp=-1, partition=0)
        p.send("api", b"max", timestamp=2**63 - 1, partition=0)
    assert [(r.value, r.timestamp) for r in store.consumer("api")] == [(b"none", -1), (b"max", 2**63 - 1)]


# -- produce: sources ----------------------------------------------------------------------------
def test_a_folder_given_as_input_is_named(cli, tmp_path):
    folder = tmp_path / "inputs"
    folder.mkdir()
    assert_one_line_error(cli("produce", "t", str(folder)), 1, f"cannot read {folder}: Is a directory")
    assert_one_line_error(cli("produce", "t", str(tmp_path / "nope.txt")), 1, f"cannot read {tmp_path / 'nope.txt'}")


def test_created_topic_message_counts_partitions(cli):
    assert cli("topics", "create", "one").stderr == "klog: created topic 'one' (1 partition, replication factor 1)\n"
    assert cli("topics", "create", "two", "-p", "2").stderr.startswith("klog: created topic 'two' (2 partitions,")


# -- store defaults (klog.json) ------------------------------------------------------------------
def test_store_defaults_from_klog_json(cli, data_dir):
    assert cli("topics", "create", "first").exit_code == 0  # makes the store
    path = os.path.join(data_dir, "klog.json")
    with open(path) as f:
        doc = json.load(f)
    doc["defaults"] = {"num.partitions": "3", "auto.create.topics.enable": "false"}
    with open(path, "w") as f:
        json.dump(doc, f)
    assert cli("topics", "create", "second").stderr.startswith("klog: created topic 'second' (3 partitions,")
    r = cli("produce", "missing", input=b"x\n")
    assert_one_line_error(r, 1, "unknown topic 'missing'", "auto.create.topics.enable is false")
    with klog.open(data_dir) as s:
        assert not s.has_topic("missing")
        assert s.partition_count("second") == 3
        with pytest.raises(klog.KlogError, match="auto.create.topics.enable is false"):
            s.producer().send("missing", b"x")
    assert cli("produce", "second", input=b"x\n").exit_code == 0  # existing topics still take records


# -- dump ----------------------------------------------------------------------------------------
def test_dump_of_a_file_that_is_no_segment_is_an_error(cli, tmp_path):
    garbage = tmp_path / "00000000000000000000.log"
    garbage.write_bytes(b"garbage!")
    r = cli("dump", str(garbage))
    assert_one_line_error(r, 1, "partial batch header of 8 bytes", str(garbage))


# -- time specs ----------------------------------------------------------------------------------
def test_spans_may_say_ago():
    now = 1_700_000_000_000
    assert parse_time_ms("15m ago", now) == parse_time_ms("15m", now) == now - 15 * 60_000
    assert parse_time_ms("  2h  AGO ", now) == now - 2 * 3_600_000
    for bad in ("ago", "15 ago", "15m agox", "yesterday ago"):
        with pytest.raises(UsageError, match="invalid time"):
            parse_time_ms(bad, now)


def test_consume_since_a_span_ago_as_the_help_says(cli, store):
    now = int(time.time() * 1000)
    with store.producer() as p:
        p.send("ago", b"old", timestamp=now - 3_600_000)
        p.send("ago", b"new", timestamp=now + 60_000)
    assert "15m ago" in " ".join(cli("consume", "--help").out.replace("│", " ").split())  # wrapped or not
    r = cli("consume", "ago", "--since", "15m ago")
    assert (r.exit_code, r.stdout) == (0, b"new\n")


# -- the terminal view ---------------------------------------------------------------------------
def render(record: Record) -> str:
    return TerminalView(show_topic=True, color=False).line(record)


def test_terminal_view_escapes_control_characters():
    nasty = b"\x1b]0;owned\x07title \x1b[2J\x1b[Hcleared\x00nul\rback\nnext\x7f\xc2\x9b31m\ttab"
    r = Record("t", 0, 5, 1_700_000_000_000, 0, b"k\x1b[31m", nasty, [("h\x1b", b"v\x07")])
    shown = render(r)
    assert not re.search(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]", shown.rstrip("\n")), repr(shown)
    assert r"\x1b]0;owned\x07title \x1b[2J\x1b[Hcleared\x00nul\rback\nnext\x7f\x9b31m" in shown  # tab: spaces
    assert r"k\x1b[31m" in shown and r"h\x1b=v\x07" in shown
    # JSON stays highlighted text, with its control characters escaped too
    js = render(Record("t", 0, 6, 0, 0, None, b'{"a":\r"\\u001b"}', []))
    assert r'{"a":\r"\u001b"}' in js


def test_pipes_still_get_the_raw_bytes(cli, store):
    nasty = b"\x1b]0;owned\x07\x00"
    with store.producer() as p:
        p.send("raw", nasty)
    assert cli("consume", "raw").stdout == nasty + b"\n"


# -- the delete prompt ---------------------------------------------------------------------------
def run_on_a_terminal(args: list[str], answer: bytes, data_dir: str) -> tuple[int, bytes, bytes]:
    """`klog ARGS` with stdin and stdout on a pseudo-terminal; types `answer` at the prompt."""
    leader, follower = pty.openpty()
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    proc = subprocess.Popen([sys.executable, "-m", "klog", *args], stdin=follower, stdout=follower,
                            stderr=subprocess.PIPE, env=env)
    os.close(follower)
    shown = b""
    while b"?" not in shown:  # the prompt, then the answer
        ready, _, _ = select.select([leader], [], [], 60)
        assert ready, f"no prompt; the terminal shows {shown!r}"
        shown += os.read(leader, 1024)
    os.write(leader, answer)
    err = proc.stderr.read()
    code = proc.wait(timeout=60)
    proc.stderr.close()
    os.close(leader)
    return code, shown, err


def test_declining_delete_at_the_prompt_deletes_nothing(cli, data_dir):
    cli("produce", "keep", input=b"x\n")
    code, shown, err = run_on_a_terminal(["topics", "delete", "keep"], b"n\n", data_dir)
    assert b"Delete topic keep and all its records?" in shown
    # (input() writes the space after the prompt to stderr, the same terminal for a user)
    assert (code, err.strip()) == (1, b"klog: aborted, nothing deleted")
    assert cli("consume", "keep").stdout == b"x\n"
    code, _, err = run_on_a_terminal(["topics", "delete", "keep"], b"y\n", data_dir)
    assert (code, err.strip()) == (0, b"Deleted topic keep")
    assert cli("topics", "list", "--json").stdout == b""


@pytest.mark.parametrize("args", [("topics", "delete-records", "t", "--before", "\u00b2"),
                                  ("consume", "t", "--since", "\u00b2"), ("consume", "t", "--until", "\u00b9")])
def test_a_non_ascii_digit_in_a_time_or_offset_is_one_line_and_exit_2(data_dir, args):
    """str.isdigit() accepts '²', which int() refuses: a traceback before the isascii check."""
    assert run_klog(data_dir, "topics", "create", "t").returncode == 0
    r = run_klog(data_dir, *args)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
