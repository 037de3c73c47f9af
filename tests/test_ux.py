"""The everyday viewer and shell tool (issue 16): what a kcat, rpk or `tail -f` user sees."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time

import klog

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_too_large_line_is_one_line_and_keeps_the_lines_before(cli, data_dir):
    big = b"x" * 1_100_000
    for lines in (big + b"\n", b"a\nb\n" + big + b"\nc\n"):
        topic = f"big{len(lines)}"
        r = cli("produce", topic, input=lines)
        assert r.exit_code == 1
        errors = [line for line in r.stderr.splitlines() if "created topic" not in line]
        assert len(errors) == 1 and "larger than max.message.bytes" in errors[0], r.stderr
        assert "Traceback" not in r.stderr
        with klog.open(data_dir) as s:
            assert [x.value for x in s.consumer(topic)] == lines.split(big)[0].split(b"\n")[:-1]


def test_create_if_not_exists_says_it_exists_and_warns_on_a_difference(cli):
    assert cli("topics", "create", "orders", "-p", "3").exit_code == 0
    r = cli("topics", "create", "orders", "-p", "3", "--if-not-exists")
    assert r.exit_code == 0 and "already exists (3 partitions" in r.stderr and "Created" not in r.stderr
    assert "warning" not in r.stderr
    r = cli("topics", "create", "orders", "-p", "6", "--if-not-exists")
    assert r.exit_code == 0 and "already exists (3 partitions" in r.stderr
    assert "warning: topic orders differs from the request (6 partitions)" in r.stderr


def test_dump_of_a_new_partition_folder_path_is_empty_not_an_error(cli, data_dir):
    assert cli("topics", "create", "orders").exit_code == 0
    with klog.open(data_dir) as s:
        log_dir = s.data_dir.log_dir_path(s.log_dir_ids()[0])
    for path in (os.path.join(log_dir, "orders-0"), "orders-0", "orders"):
        r = cli("dump", path)
        assert (r.exit_code, r.stdout, r.stderr) == (0, b"", ""), path


def test_consume_without_a_topic_is_a_usage_error(cli, data_dir):
    cli("topics", "create", "t")
    r = cli("consume")
    assert r.exit_code == 2 and "give a topic" in r.stderr


# -- the terminal view -----------------------------------------------------------------------------
SGR = re.compile(r"\x1b\[[0-9;]*m")


def on_a_terminal(args: list[str], data_dir: str, env: dict[str, str] | None = None, until: bytes | None = None,
                  then=None, timeout: float = 30) -> tuple[int | None, bytes, bytes]:
    """`klog ARGS` with stdout on a pty; reads until exit (or until `until` shows, then calls `then`)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "klog", *args], stdout=follower, stderr=subprocess.PIPE,
                            env={**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO, **(env or {})})
    os.close(follower)
    shown, deadline = b"", time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.2)
            if ready:
                try:
                    data = os.read(leader, 65536)
                except OSError:
                    break
                if not data:
                    break
                shown += data
            if until is not None and until in shown and then is not None:
                then()
                then = None
            if proc.poll() is not None and not ready:
                break
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    err = proc.stderr.read()
    proc.stderr.close()
    return code, shown, err


def test_terminal_view_has_rich_colours_and_no_color_turns_them_all_off(cli, data_dir):
    cli("produce", "v", "-K:", input=b'k:{"a": [1, true, null, "s"]}\nk2:plain\n')
    code, shown, _ = on_a_terminal(["consume", "v"], data_dir)
    text = shown.decode()
    assert code == 0 and "\x1b[1;33mk\x1b[0m" in text and "\x1b[36m0@0\x1b[0m" in text
    assert '\x1b[1;34m"a"\x1b[0m' in text and "\x1b[3;92mtrue\x1b[0m" in text and "\x1b[2m" in text
    plain = SGR.sub("", text)
    assert re.search(r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z  0@0  k  \{"a": \[1, true, null, "s"\]\}\r$', plain,
                     re.M), plain
    for args, env in ((["consume", "v", "--no-color"], {}), (["consume", "v"], {"NO_COLOR": "1"})):
        code, shown, _ = on_a_terminal(args, data_dir, env)
        assert code == 0 and b"\x1b" not in shown and shown.decode() == plain


def test_local_time_flag_and_tz(cli, data_dir, store):
    with store.producer() as p:
        p.send("when", b"x", timestamp=1_700_000_000_123)
    for args, env in ((["consume", "when", "--local-time"], {"TZ": "Asia/Kolkata"}),
                      (["consume", "when"], {"TZ": "Asia/Kolkata"})):
        assert b"2023-11-15T03:43:20.123+05:30" in on_a_terminal(args, data_dir, env)[1]
    assert b"2023-11-14T22:13:20.123Z" in on_a_terminal(["consume", "when"], data_dir, {"TZ": ""})[1]


def test_follow_on_a_terminal_hints_while_waiting_and_a_deleted_topic_ends_it(cli, data_dir):
    cli("produce", "gone", input=b"one\n")

    def delete() -> None:
        assert cli("topics", "delete", "gone", "--yes").exit_code == 0

    code, shown, err = on_a_terminal(["consume", "gone", "-f"], data_dir, until=b"waiting for records", then=delete)
    assert b"one" in shown and b"waiting for records" in shown
    assert code == 1 and err.decode().strip() == "klog: error: topic 'gone' was deleted while being followed"


def test_follow_on_a_pipe_of_a_deleted_topic_exits_1(data_dir, cli):
    cli("produce", "gone", input=b"one\n")
    proc = subprocess.Popen([sys.executable, "-m", "klog", "consume", "gone", "-f"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO})
    try:
        assert proc.stdout.readline() == b"one\n"
        assert cli("topics", "delete", "gone", "--yes").exit_code == 0
        cli("produce", "gone", input=b"two\n")  # created again: a new topic, not this one
        assert proc.wait(timeout=20) == 1
        assert b"was deleted while being followed (and created again" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
