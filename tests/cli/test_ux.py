"""The everyday viewer and shell tool (issue 16): what a kcat, rpk or `tail -f` user sees."""

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

import klog
from tests.conftest import REPO
from tests.klog_processes import stop


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


@pytest.mark.parametrize("args", [["-k", "K"], ["-K", ":"], ["-D", "\\0"], ["--input", "json"]])
def test_a_too_large_record_is_one_line_in_every_input_mode(cli, data_dir, args):
    big = b"x" * 1_100_000
    if args[0] == "--input":
        data = b'{"value": "a"}\n{"value": "' + big + b'"}\n'
    else:
        end = b"\0" if args[0] == "-D" else b"\n"
        data = b"a" + end + big + end
    r = cli("produce", "t", *args, input=data)
    errors = [line for line in r.stderr.splitlines() if "created topic" not in line]
    assert r.exit_code == 1 and len(errors) == 1 and "larger than max.message.bytes" in errors[0], r.stderr
    assert "1 records before it were written" in errors[0]
    with klog.open(data_dir) as s:
        assert [x.value for x in s.consumer("t")] == [b"a"]


def test_create_if_not_exists_says_it_exists_and_warns_on_a_difference(cli):
    assert cli("topics", "create", "orders", "-p", "3").exit_code == 0
    r = cli("topics", "create", "orders", "-p", "3", "--if-not-exists")
    assert r.exit_code == 0 and "already exists (3 partitions" in r.stderr and "created topic" not in r.stderr
    assert "warning" not in r.stderr
    r = cli("topics", "create", "orders", "-p", "6", "--if-not-exists")
    assert r.exit_code == 0 and "already exists (3 partitions" in r.stderr
    assert "warning: topic orders differs from the request (6 partitions)" in r.stderr


def test_dump_of_a_new_partition_folder_path_is_empty_not_an_error(cli, data_dir):
    assert cli("topics", "create", "orders").exit_code == 0
    with klog.open(data_dir) as s:
        log_dir = s.data_dir.log_dir_path(s.log_dir_ids()[0])
    for path in (os.path.join(log_dir, "orders-0"), os.path.join(log_dir, "orders-0") + "/", "orders-0", "orders"):
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


@pytest.mark.slow
def test_follow_on_a_terminal_hints_while_waiting_and_a_deleted_topic_ends_it(cli, data_dir):
    cli("produce", "gone", input=b"one\n")

    def delete() -> None:
        assert cli("topics", "delete", "gone", "--yes").exit_code == 0

    code, shown, err = on_a_terminal(["consume", "gone", "-f"], data_dir, until=b"waiting for records", then=delete)
    assert b"one" in shown and b"waiting for records" in shown
    assert code == 1 and err.decode().strip() == "klog: error: topic 'gone' was deleted while being followed"


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ["-G", "g"], ["-G", "g", "--json"]], ids=["plain", "group", "group-json"])
def test_follow_on_a_pipe_of_a_deleted_topic_exits_1(data_dir, cli, extra):
    cli("produce", "gone", input=b"one\n")
    proc = subprocess.Popen([sys.executable, "-m", "klog", "consume", "gone", "-f", *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO})
    try:
        assert select.select([proc.stdout], [], [], 20)[0] and b"one" in proc.stdout.readline()
        assert cli("topics", "delete", "gone", "--yes").exit_code == 0
        cli("produce", "gone", input=b"two\n")  # created again: a new topic, not this one
        assert proc.wait(timeout=20) == 1
        # (the follower may look between the delete and the new produce: then it saw no new topic yet)
        assert proc.stderr.read() in (b"klog: error: topic 'gone' was deleted while being followed (and created "
                                      b"again: read it anew)\n",
                                      b"klog: error: topic 'gone' was deleted while being followed\n")
    finally:
        stop(proc)


# -- tables, sizes, escaping -------------------------------------------------------------------------
@pytest.mark.slow
def test_tables_never_cut_a_heading_or_value_on_an_80_column_terminal(cli, data_dir):
    cli("topics", "create", "quickstart-access-log-with-a-long-name", "-p", "2", "-c", "cleanup.policy=compact")
    cli("produce", "quickstart-access-log-with-a-long-name", "-K:", input=b"k:v\n" * 3000)
    for args in (["topics", "describe", "quickstart-access-log-with-a-long-name"], ["topics", "list"],
                 ["dirs", "list"]):
        code, shown, _ = on_a_terminal(args, data_dir, {"COLUMNS": "80"})
        text = SGR.sub("", shown.decode())
        assert code == 0 and "…" not in text, text
        piped = cli(*args).out
        for word in piped.split():  # every heading and value of the pipe's table is on the terminal
            whole = word in text or "-" in word and all(part in text for part in word.split("-"))
            assert whole or word.isdigit() and len(word) > 3, (word, text)  # sizes: human on the terminal
        table = [line for line in text.splitlines()  # but a long path, which the terminal wraps
                 if not line.startswith("PATH ")]
        assert all(len(line) <= 80 for line in table), text
    code, shown, _ = on_a_terminal(["topics", "describe", "quickstart-access-log-with-a-long-name"], data_dir,
                                   {"COLUMNS": "80"})
    lines = SGR.sub("", shown.decode()).splitlines()
    lines = lines[next(i for i, line in enumerate(lines) if line.startswith("PARTITION")) - 2:]  # heading wrapped
    assert lines[2].split() == ["PARTITION", "LEADER", "REPLICAS", "ISR", "EPOCH", "LOG-", "HIGH-", "LOG-", "SIZE",
                                "SEGMENTS", "DIRTY-"]  # headings broken at their hyphen, whole
    assert lines[3].split() == ["START", "WATERMARK", "END", "RATIO"] and lines[4].split()[6] == "3000"


def test_sizes_are_human_on_a_terminal_and_bytes_in_pipes_and_json(cli, data_dir):
    cli("produce", "s", input=b"x" * 1000 + b"\n")
    size = [json.loads(line)["size_bytes"] for line in cli("topics", "list", "--json").out.splitlines()][0]
    assert cli("topics", "list").out.split()[-1] == str(size)
    assert re.search(rb"\b1\.\d KiB\r?$", on_a_terminal(["topics", "list"], data_dir)[1], re.M)
    assert re.search(rb"KiB", on_a_terminal(["dirs", "list"], data_dir)[1])
    from klog.cli.tables import format_table, size_cell

    assert format_table(["SIZE"], [[size_cell(None)]], None) == ["SIZE", "-"]  # a cluster's unknown size ('None')
    assert cli("dirs", "list").out.splitlines()[1].split()[3] == str(
        json.loads(cli("dirs", "list", "--json").out)["size_bytes"])


def test_dump_escapes_record_bytes(cli, data_dir):
    cli("produce", "d", "-K:", "-H", "h\x1b[31m=v\x07", input=b"k\x1b[2J:\x1b]0;TITLE\x07v\x00\n")
    r = cli("dump", "d-0")
    assert r.exit_code == 0 and not re.search(rb"[\x00-\x08\x0b-\x1f\x7f]", r.stdout), r.stdout
    assert (r"key: k\x1b[2J headers: [h\x1b[31m=v\x07] payload: \x1b]0;TITLE\x07v\x00" in r.out), r.out


def test_group_member_client_ids_are_escaped(cli, data_dir):
    cli("produce", "t", input=b"a\n")
    proc = subprocess.Popen([sys.executable, "-m", "klog", "consume", "t", "-f", "-G", "g", "-X",
                             "client.id=evil\x1b]0;TITLE\x07"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO})
    try:
        assert select.select([proc.stdout], [], [], 20)[0] and proc.stdout.readline() == b"a\n"
        r = cli("groups", "describe", "g", "--members")
        assert r.exit_code == 0 and r"evil\x1b]0;TITLE\x07" in r.out and b"\x1b" not in r.stdout, r.out
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        proc.stdout.close()
        proc.stderr.close()


def test_sigterm_and_ctrl_c_stop_plain_and_group_consumers_alike(cli, data_dir):
    import signal

    cli("produce", "t", input=b"a\n")
    for group in (None, "g"):
        for sig, code, said in ((signal.SIGTERM, 143, b"klog: terminated\n"), (signal.SIGINT, 130,
                                                                              b"klog: interrupted\n")):
            extra = ["-G", f"{group}-{sig}"] if group else []
            proc = subprocess.Popen([sys.executable, "-m", "klog", "consume", "t", "-f", *extra],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env={**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO},
                                    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
            try:
                assert select.select([proc.stdout], [], [], 20)[0] and proc.stdout.readline() == b"a\n"
                proc.send_signal(sig)
                assert (proc.wait(timeout=20), proc.stderr.read()) == (code, said), (extra, sig)
            finally:
                stop(proc)


# -- what users reach for ----------------------------------------------------------------------------
def test_last_n_is_the_newest_records_of_the_whole_topic_in_time_order(cli, store):
    store.create_topic("t", partitions=3)
    with store.producer() as p:
        for i in range(30):
            p.send("t", b"v%d" % i, partition=i % 3, timestamp=1_000 + i)
    assert cli("consume", "t", "--last", "4").stdout == b"v26\nv27\nv28\nv29\n"
    assert cli("consume", "t", "--last", "4", "-n", "2").stdout == b"v26\nv27\n"
    assert cli("consume", "t", "--last", "0").stdout == b""
    r = cli("consume", "t", "--last", "2", "--tail", "1")
    assert r.exit_code == 2 and "only one of" in r.stderr
    assert cli("consume", "t", "--last", "50").stdout.count(b"\n") == 30


def test_last_n_counts_records_not_offsets(cli):
    """A transaction's commit marker takes the last offset: `--last 1` printed nothing, `--last 2` one record."""
    assert cli("produce", "t", "--transactional-id", "tx", input=b"a\nb\nc\n").exit_code == 0
    assert cli("consume", "t", "--last", "1").stdout == b"c\n"
    assert cli("consume", "t", "--last", "2").stdout == b"b\nc\n"
    for value in (b"d", b"e", b"f"):  # one record a transaction: every other offset is a marker
        assert cli("produce", "t", "--transactional-id", "tx", input=value + b"\n").exit_code == 0
    assert cli("consume", "t", "--last", "4").stdout == b"c\nd\ne\nf\n"
    assert cli("consume", "t", "--last", "4", "-X", "isolation.level=read_committed").stdout == b"c\nd\ne\nf\n"


def read_until(pipe, end: bytes, timeout: float = 20) -> bytes:
    """Bytes from a pipe until they end with `end` (bounded in time; unbuffered reads)."""
    got, deadline = b"", time.monotonic() + timeout
    while not got.endswith(end) and time.monotonic() < deadline:
        if select.select([pipe], [], [], 0.2)[0]:
            data = os.read(pipe.fileno(), 65536)
            if not data:
                break
            got += data
    return got


def test_last_n_then_follow(cli, data_dir, store):
    store.create_topic("f", partitions=2)
    with store.producer() as p:
        for i in range(6):
            p.send("f", b"old%d" % i, partition=i % 2, timestamp=1_000 + i)
    proc = subprocess.Popen([sys.executable, "-m", "klog", "consume", "f", "--last", "2", "-f"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO})
    try:
        assert read_until(proc.stdout, b"old5\n") == b"old4\nold5\n"
        cli("produce", "f", "-p", "0", input=b"new\n")
        assert read_until(proc.stdout, b"new\n") == b"new\n"
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_grep_key_and_grep_header(cli, store):
    with store.producer() as p:
        p.send("g", b"one", key=b"user-1", headers=[("src", b"web")])
        p.send("g", b"two", key=b"user-2", headers=[("src", b"app")])
        p.send("g", b"three", key=None)
    assert cli("consume", "g", "--grep-key", "-2$").stdout == b"two\n"
    assert cli("consume", "g", "--grep-header", "^src=web$").stdout == b"one\n"
    assert cli("consume", "g", "--grep-key", "user", "--grep", "^t").stdout == b"two\n"
    r = cli("consume", "g", "--grep-key", "(")
    assert r.exit_code == 2 and "invalid --grep-key" in r.stderr


def test_produce_constant_key_and_delimiter(cli, data_dir):
    cli("topics", "create", "k", "-p", "4")
    assert cli("produce", "k", "-k", "user-7", input=b"a\nb\n").exit_code == 0
    assert cli("produce", "d", "-D", "\\0", input=b"x\ny\0z\0").exit_code == 0
    assert cli("produce", "d2", "-D", "||", "-k", "K", input=b"1||2||3").exit_code == 0
    with klog.open(data_dir) as s:
        recs = list(s.consumer("k"))
        assert [(r.key, r.value) for r in recs] == [(b"user-7", b"a"), (b"user-7", b"b")]
        assert len({r.partition for r in recs}) == 1
        assert [r.value for r in s.consumer("d")] == [b"x\ny", b"z"]
        assert [(r.key, r.value) for r in s.consumer("d2")] == [(b"K", b"1"), (b"K", b"2"), (b"K", b"3")]
    r = cli("produce", "k", "-k", "a", "-K", ":", input=b"x\n")
    assert r.exit_code == 2 and "--key" in r.stderr
    assert cli("produce", "k", "-D", "", input=b"x").exit_code == 2


# -- help and man pages ---------------------------------------------------------------------------------
def test_help_placeholders_are_words_and_name_the_store_in_force(cli, data_dir, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    for args in (["consume", "--help"], ["topics", "create", "--help"], ["produce", "--help"]):
        text = cli(*args).out
        assert not re.search(r"<(list\[)?(int|str|bool)\]?>|\{topic\}", text), text
    text = cli("topics", "create", "--help").out
    assert "[OPTIONS] TOPIC" in text and re.search(r"--partitions\s+-p\s+N\s", text)
    assert f"now {data_dir}, from KLOG_DATA_DIR" in cli("consume", "--help").out


def test_man_pages_have_whole_names_and_a_klog_footer():
    import pathlib

    man = pathlib.Path(REPO) / "man"
    page = (man / "klog-groups-describe.1").read_text()
    assert page.splitlines()[0] == '.TH "KLOG GROUPS DESCRIBE" "1" "" "klog 0.1.0" "klog groups describe Manual"'
    assert "and the server's pid)." in page.splitlines()[2]  # the whole description, not cut short
    for path in man.glob("*.1"):
        name_line = path.read_text().splitlines()[2]
        assert not name_line.endswith(("...", "…")), path.name


def test_topics_clean_prints_only_what_changed_and_a_summary(cli, store):
    store.create_topic("keep", partitions=3)
    store.create_topic("trim", partitions=2, configs={"segment.bytes": "1024"})
    with store.producer() as p:
        for i in range(200):
            p.send("keep", b"x" * 50)
            p.send("trim", b"y" * 50, partition=0)
            if i % 20 == 19:
                p.flush()  # one batch each: segments of 1 KiB roll
    store.alter_topic("trim", set_configs={"retention.bytes": "1500"})
    r = cli("topics", "clean")
    assert r.exit_code == 0, r.stderr
    lines = r.stderr.splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == ["Cleaned trim-0"], r.stderr
    assert re.fullmatch(r"1 of 5 partitions changed: \d+ segments \(.*\) deleted, 0 records compacted away", lines[-1])
    r = cli("topics", "clean")
    assert r.stderr.splitlines() == ["0 of 5 partitions changed: 0 segments (0 B) deleted, 0 records compacted away"]


def test_a_compaction_that_removes_nothing_is_not_a_change(cli, store):
    """Records all in the active segment: `topics compact` said `1 of 1 partition changed`."""
    store.create_topic("users", partitions=1, configs={"cleanup.policy": "compact"})
    assert cli("produce", "users", "-K", ":", input=b"u1:a\nu2:b\nu1:c\n").exit_code == 0
    r = cli("topics", "compact", "users")
    assert r.exit_code == 0, r.stderr
    assert r.stderr.splitlines() == ["0 of 1 partition changed: 0 segments (0 B) deleted, 0 records compacted away"]


def test_a_follower_the_log_outruns_skips_ahead_and_says_so(store, monkeypatch):
    from klog.cli import view
    from klog.cli.view import TerminalView

    monkeypatch.setattr(view, "FLUSH_LINES", 100)
    monkeypatch.setattr(view, "KEEP_RECORDS", 200)
    store.create_topic("fast")
    with store.producer() as p:
        for i in range(300):
            p.send("fast", b"history %d" % i)
    consumer = store.consumer("fast", start="beginning", follow=True)

    class Done(Exception):
        pass

    waits = []

    def wait_for_data() -> None:  # the history is drawn: a burst lands faster than any terminal draws it
        waits.append(1)
        if len(waits) > 1:
            raise Done
        with store.producer() as p:
            for i in range(3000):
                p.send("fast", b"new %d " % i + b"x" * 2000)

    monkeypatch.setattr(consumer, "_wait_for_data", wait_for_data)
    out: list[bytes] = []
    with pytest.raises(Done):
        TerminalView(False, color=False, skip_lag=500).draw(consumer, out.append)
    text = b"".join(out).decode()
    assert all(f"0@{i}  history {i}" in text for i in range(300))  # what was there is drawn whole
    notes = [int(n.replace(",", "")) for n in re.findall(r"… ([\d,]+) records skipped to keep up", text)]
    assert len(notes) == 1 and notes[0] > 1000, text[-500:]
    offsets = [int(m) for m in re.findall(r"  0@(\d+)  ", text)]
    assert offsets == sorted(offsets) and offsets[-1] == 3299  # the newest are drawn
    assert len(offsets) + notes[0] == 3300  # every record is either drawn or counted as skipped


def test_format_and_json_on_a_terminal_escape_control_characters(cli, data_dir):
    cli("produce", "tt", "-K:", input=b"k\x1b[2J:v\xc2\x9b31m\x07\n")
    _, shown, _ = on_a_terminal(["consume", "tt", "-F", "%k|%s\\n"], data_dir)
    assert shown == b"k\\x1b[2J|v\\x9b31m\\x07\r\n"
    _, shown, _ = on_a_terminal(["consume", "tt", "--json"], data_dir)
    doc = json.loads(shown)
    assert (doc["key"], doc["value"]) == ("k\x1b[2J", "v\x9b31m\x07")
    assert not re.search(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]", shown.rstrip(b"\r\n"))
    assert cli("consume", "tt", "-F", "%k|%s\\n").stdout == b"k\x1b[2J|v\xc2\x9b31m\x07\n"  # pipes: raw


def test_no_color_drops_bold_from_help_too(data_dir):
    code, shown, _ = on_a_terminal(["topics", "--help"], data_dir, {"NO_COLOR": "1"})
    assert code == 0 and b"Usage:" in shown and b"\x1b[" not in shown
    code, shown, _ = on_a_terminal(["topics", "--help"], data_dir, {"NO_COLOR": ""})
    assert b"\x1b[1m" in shown


def test_a_group_member_on_a_terminal_shows_the_log_view_and_commits(cli, data_dir):
    """consume --group on a terminal draws the readable view (position, escaped value), as plain consume
    does, and commits what it drew (klog.client.delivery with the CLI's terminal line)."""
    cli("produce", "t", "-K:", input=b"k1:one\nk2:tw\x1bo\n")
    code, shown, err = on_a_terminal(["consume", "t", "-G", "g", "--no-color"], data_dir)
    text = shown.decode()
    assert code == 0, err
    assert "0@0  k1  one" in text and "0@1  k2  tw\\x1bo" in text and "\x1b" not in text
    assert b'"committed": 2' in cli("groups", "describe", "g", "--json").stdout
