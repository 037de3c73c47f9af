"""Every klog command against bad input, as a real process: one error line on stderr, exit 2 for bad
input (1 for a runtime failure), never a traceback, and the store still verifies afterwards.
A seeded campaign over every command (klog.cli.gendocs.walk_commands) and the cases it found."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading

import pytest
from test_cli import assert_one_line_error

from tests.klog_processes import klog_env, require_mount_namespace, run_klog


def run_shell(data_dir: str, script: str) -> subprocess.CompletedProcess:
    """`script` in sh, `klog` meaning this tree's `python -m klog` (for redirections such as <&-)."""
    klog = f"{sys.executable} -m klog"
    return subprocess.run(["sh", "-c", script.replace("klog ", f"{klog} ")], capture_output=True, text=True,
                          timeout=60, env=klog_env(data_dir))


def assert_error_line(r: subprocess.CompletedProcess, code: int, text: str) -> None:
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == code, (r.returncode, r.stderr)
    assert r.stderr.strip().splitlines() == [f"klog: error: {text}"], r.stderr


def assert_store_verifies(data_dir: str) -> None:
    r = run_shell(data_dir, "klog verify")
    assert r.returncode == 0, r.stdout + r.stderr


# -- closed standard streams -----------------------------------------------------------------------
@pytest.mark.slow
def test_a_closed_stdin_is_named_not_a_traceback(data_dir):
    assert run_shell(data_dir, "echo a | klog produce t").returncode == 0
    assert_error_line(run_shell(data_dir, "klog produce t <&-"), 1, "standard input is closed")
    assert_error_line(run_shell(data_dir, "klog users add bob <&-"), 1, "standard input is closed")
    # a command that does not read stdin does not care
    assert run_shell(data_dir, "klog consume t -e <&-").stdout == "a\n"
    assert_store_verifies(data_dir)


@pytest.mark.slow
def test_a_closed_stdout_is_named_and_nothing_is_committed(data_dir):
    assert run_shell(data_dir, "printf 'a\\nb\\n' | klog produce t").returncode == 0
    for command in ("klog topics list", "klog offsets t", "klog groups list", "klog consume t -e",
                    "klog consume t -e --json", "klog consume t -e -G g", "klog verify"):
        assert_error_line(run_shell(data_dir, f"{command} >&-"), 1, "standard output is closed")
    # the group printed nothing, so it committed nothing
    assert_error_line(run_shell(data_dir, "klog groups describe g"), 1, "unknown group 'g'")
    # what writes only to stderr still works
    r = run_shell(data_dir, "klog topics create u >&-")
    assert (r.returncode, r.stderr) == (0, "klog: created topic 'u' (1 partition, replication factor 1)\n")
    assert_store_verifies(data_dir)


def test_a_closed_stderr_keeps_errors_off_stdout(data_dir):
    assert run_shell(data_dir, "echo a | klog produce t").returncode == 0
    r = run_shell(data_dir, "klog consume nope -e 2>&-")
    assert (r.returncode, r.stdout) == (1, "")  # the error line had nowhere to go; it is not data
    r = run_shell(data_dir, "klog consume t -e 2>&-")
    assert (r.returncode, r.stdout) == (0, "a\n")


def test_a_file_opened_with_stdout_closed_never_becomes_stdout(data_dir):
    """With fd 1 closed, the first file klog opens would become fd 1, where a --exec child writes.
    A guard: no damage was seen before the fix either (the first write failed before any child ran)."""
    assert run_shell(data_dir, "echo a | klog produce t").returncode == 0
    run_shell(data_dir, "klog consume t -e --exec 'echo STRAY' >&-")
    for folder, _, names in os.walk(data_dir):
        for name in names:
            with open(os.path.join(folder, name), "rb") as f:
                assert b"STRAY" not in f.read(), name
    assert_store_verifies(data_dir)


def test_an_exec_command_cut_off_by_a_closed_stdout_ends_quietly(data_dir):
    """`klog consume t --exec cat | head -1`: cat dies of SIGPIPE once head has gone; that was
    'klog: error: --exec command exited 141' (exit 1), where klog's own writes end quietly (exit 0)."""
    lines = "".join(f"{i}\n" for i in range(3000))
    assert run_shell(data_dir, f"printf '{lines}' | klog produce t").returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "klog", "consume", "t", "-e", "--exec", "cat", "--batch", "10"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=klog_env(data_dir))
    assert proc.stdout.readline() == b"0\n"
    proc.stdout.close()
    assert (proc.wait(timeout=60), proc.stderr.read()) == (0, b"")
    proc.stderr.close()
    # a command that dies of SIGPIPE for its own reasons is still named
    r = run_shell(data_dir, "klog consume t -e -n 2 --exec 'kill -PIPE $$'")
    assert_error_line(r, 1, "--exec command: broken pipe at t-0 offset 0")


# -- klog connect's --url --------------------------------------------------------------------------
MALFORMED_URLS = [".", "", " ", "http://", "ftp://x/", "http://[::1", "http://127.0.0.1:abc",
                  "http://127.0.0.1:99999", "http://127.0.0.1:0", "http://a b:1"]
CONNECT_CALLS = [["list"], ["status", "c"], ["restart", "c"], ["delete", "c"], ["pause", "c"]]


@pytest.mark.slow
def test_a_malformed_connect_url_is_a_usage_error(data_dir):
    for i, url in enumerate(MALFORMED_URLS):
        r = run_klog(data_dir, "connect", *CONNECT_CALLS[i % len(CONNECT_CALLS)], "--url", url)
        assert_error_line(r, 2, r.stderr.strip().removeprefix("klog: error: "))
        assert r.stderr.startswith(f"klog: error: invalid --url '{url}'"), r.stderr


def test_a_web_server_that_is_not_connect_is_named(data_dir):
    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"<html>hello</html>")

        def log_message(self, *args: object) -> None:
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_port}"
        r = run_klog(data_dir, "connect", "list", "--url", url)
        server.shutdown()
    assert_error_line(r, 1, f"{url} answered /connectors?expand=status with something other than JSON: "
                            "is it a Connect worker?")


# -- names the store cannot hold -------------------------------------------------------------------
def test_an_empty_group_or_transactional_id_is_a_usage_error(cli):
    """An empty id reached LMDB as a key it refuses: 'metadata error ... MDB_BAD_VALSIZE', exit 1."""
    cli("produce", "t", input=b"a\n")
    for args in (["groups", "describe", ""], ["groups", "delete", ""], ["groups", "delete-offsets", "", "-t", "t"],
                 ["groups", "reset-offsets", "", "-t", "t", "--to-earliest", "--execute"]):
        assert_one_line_error(cli(*args), 2, "invalid group id ''")
    for args in (["transactions", "describe", ""], ["transactions", "abort", ""]):
        assert_one_line_error(cli(*args), 2, "invalid transactional id ''")


def test_an_empty_data_dir_never_means_the_default_store_for_named_clusters(cli, tmp_path, monkeypatch):
    """`klog clusters add c -b h:1 -d ''` wrote the default store's clusters.json (~/.local/share/klog)
    while every other command refuses an empty --data-dir."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    for args in (["clusters", "add", "c", "-b", "h:1"], ["clusters", "list"], ["clusters", "remove", "c"],
                 ["topics", "list", "--cluster", "c"], ["consume", "t", "--cluster", "c"]):
        for empty in ("", " "):
            assert_one_line_error(cli(*args, "--data-dir", empty), 2, "the data directory path is empty")
    assert not (tmp_path / "xdg").exists()


# -- options that contradict nothing but are out of range, or named wrongly -------------------------
def test_a_negative_linger_is_refused(cli):
    """--linger-ms -1 was taken as 0 without a word (Kafka's linger.ms is at least 0)."""
    r = cli("produce", "t", "--linger-ms", "-1", input=b"a\n")
    assert_one_line_error(r, 2, "--linger-ms must be 0 or more, not -1")
    assert cli("topics", "list", "--json").out == ""  # nothing was created or written


def test_a_property_without_group_names_only_what_is_wrong(cli):
    """-X without --group once said '--batch needs --exec, and --property needs --group' to a user who gave
    no --batch; each misuse is named alone."""
    cli("produce", "t", input=b"a\n")
    assert_one_line_error(cli("consume", "t", "-X", "session.timeout.ms=10"), 2,
                          "--property needs --group (except isolation.level)")
    r = cli("consume", "t", "-X", "session.timeout.ms=10")
    assert "--batch" not in r.stderr
    assert_one_line_error(cli("consume", "t", "--batch", "2"), 2, "--batch needs --exec")


def test_last_beyond_int64_reads_everything(cli):
    """--last 2**63 raised OverflowError (a deque's maxlen is a C ssize_t): a traceback."""
    cli("produce", "t", input=b"a\nb\n")
    for huge in (str(2**63), "9" * 30):
        r = cli("consume", "t", "--last", huge)
        assert (r.exit_code, r.stdout, r.stderr) == (0, b"a\nb\n", "")


def test_mirroring_a_store_onto_itself_is_refused(cli, data_dir):
    """`klog mirror STORE STORE` appended every topic to itself (t's records twice, exit 0)."""
    cli("produce", "t", input=b"a\nb\n")
    for dest in (data_dir, data_dir + "/", data_dir + "/logs/.."):
        assert_one_line_error(cli("mirror", data_dir, dest, "t"), 2, f"refusing to mirror {data_dir} into itself")
    assert cli("consume", "t").stdout == b"a\nb\n"
    assert cli("mirror", data_dir, data_dir, "t", "--rename", "copy.{topic}").exit_code == 0
    assert cli("consume", "copy.t").stdout == b"a\nb\n"


def test_a_nan_replay_rate_is_refused(cli):
    """--rate nan passed the `rate <= 0` check (NaN compares False) and replayed unthrottled."""
    cli("produce", "t", input=b"a\n")
    for bad in ("nan", "0", "-1"):
        assert_one_line_error(cli("replay", "t", "--to", "u", "--rate", bad), 2, "--rate must be positive")


# -- a read-only store -----------------------------------------------------------------------------
READ_ONLY_MOUNT = r"""
import subprocess, sys
store = sys.argv[1]
subprocess.run(["mount", "--bind", store, store], check=True)
subprocess.run(["mount", "-o", "remount,bind,ro", store], check=True)
for args in sys.argv[2:]:
    r = subprocess.run([sys.executable, "-m", "klog", *args.split()], capture_output=True, text=True)
    print(f"{r.returncode} {args} | {r.stderr.strip()}")
"""


@pytest.mark.slow
def test_listing_commands_work_on_a_read_only_store(data_dir, tmp_path):
    """groups list|describe, transactions list|describe and dirs list opened the store for writing:
    on a read-only mount they said 'data directory ... is not writable'."""
    require_mount_namespace()
    assert run_shell(data_dir, "echo a | klog produce t && klog consume t -e -G g").returncode == 0
    commands = ["groups list", "groups describe g", "transactions list", "dirs list", "topics list"]
    r = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c", READ_ONLY_MOUNT, data_dir,
                        *commands], capture_output=True, text=True, timeout=120, env=klog_env(data_dir))
    assert r.returncode == 0, r.stderr
    said = {"groups describe g": "group g: Empty, generation 2, assignor range, 0 live member(s)"}
    assert r.stdout.splitlines() == [f"0 {c} | {said.get(c, '')}" for c in commands]
    r = run_shell(data_dir, "klog transactions describe nope")
    assert_error_line(r, 2, "no transactional id 'nope' in this store")


# -- the seeded campaign: every command, every option and argument, hostile values ------------------
HOSTILE = ["", " ", "\t", "-1", "0", str(2**63), str(-2**63 - 1), "1e309", "nan", "inf", "abc", "a" * 250, "é☃",
           "..", ".", "a/b", "-", "%", "{", "%{", "x=", "=y", "noeq", "a=b", "-1h", "2026-13-45",
           "2026-02-30T25:00", "+", "1:2:3", "::", "99999999999999999999", "0x10", "1.5", "-0", "@", "s@x", "e@",
           "1,2,", ",", "%T%K%Z%Q", "%(", "\\", "/", "http://[::1", "127.0.0.1:1", "localhost:", ":99999", "[::1"]
BAD_PAIRS = ["noeq", "=", "unknown.key=1", "linger.ms=abc", "acks=7", "retention.ms=-5", "segment.bytes=0",
             "max.message.bytes=1e309", f"batch.size={2**63}"]
PAIR_OPTIONS = {"--property", "--dest-property", "--source-property", "--config", "--conf"}
# long-running by design (a server, a worker, a JVM), or reading another program's input
SKIPPED = ("klog serve", "klog connect run", "klog connect worker", "klog spark", "klog mirror", "klog registry")
ARGUMENT_DEFAULTS = {"TOPIC": "t", "TOPICS": "t", "SOURCE": "t", "GROUP": "g", "NAME": "n1", "LOG_DIR": "0",
                     "QUOTAS": "producer_byte_rate=10", "KEYS": "producer_byte_rate", "TRANSACTIONAL_ID": "tx"}


def campaign_cases(rng, values_per_parameter: int) -> list[list[str]]:
    """argv lists: each command's arguments at sensible values, then one parameter at a time made hostile."""
    from klog.cli.gendocs import cli_command, walk_commands

    cases = []
    for path, command in walk_commands(cli_command()):
        if getattr(command, "commands", None) or path == "klog" or path.startswith(SKIPPED):
            continue
        words = path.split()[1:]
        arguments = [p for p in command.params if p.param_type_name == "argument"]
        base = [ARGUMENT_DEFAULTS.get(p.name.upper(), "t") for p in arguments]
        for param in command.params:
            if getattr(param, "is_flag", False) or param.name == "help":
                continue
            for value in rng.sample(HOSTILE, values_per_parameter):
                if param.param_type_name == "argument":
                    args = list(base)
                    args[arguments.index(param)] = value
                    cases.append(words + args)
                else:
                    option = max(param.opts, key=len)
                    cases.append(words + base + [option, rng.choice(BAD_PAIRS) if option in PAIR_OPTIONS else value])
    rng.shuffle(cases)
    return cases


def pristine_store(cli, path: str) -> None:
    """Topic t (2 partitions, 5 keyed records) and group g that read it."""
    assert cli("topics", "create", "t", "-p", "2", "--data-dir", path).exit_code == 0
    assert cli("produce", "t", "-K", ":", "--data-dir", path, input=b"k0:a\nk1:b\nk2:c\nk3:d\nk4:e\n").exit_code == 0
    assert cli("consume", "t", "-e", "-G", "g", "--data-dir", path).exit_code == 0


def run_campaign(cli, data_dir: str, tmp_path, seed: int, values_per_parameter: int, budget_s: float,
                 min_cases: int = 0) -> int:
    """Every case in-process against a fresh copy of a small store, the first `min_cases` whatever the
    time they take (a loaded machine runs fewer in the budget), then more until `budget_s` has passed;
    returns how many ran. A case fails on an
    exception that escapes the CLI (what a user sees as a traceback), an exit code other than 0, 1 or 2,
    or an error that is not exactly one line."""
    import random
    import shutil
    import time

    pristine = str(tmp_path / "pristine")
    pristine_store(cli, pristine)
    deadline = time.monotonic() + budget_s
    cases = campaign_cases(random.Random(seed), values_per_parameter)
    ran = 0
    for argv in cases:
        if ran >= min_cases and time.monotonic() > deadline:
            break
        shutil.rmtree(data_dir, ignore_errors=True)
        shutil.copytree(pristine, data_dir)
        try:
            r = cli(*argv, input=b"")
        except BaseException as e:  # noqa: BLE001 - the finding: what escaped the CLI's error handling
            raise AssertionError(f"klog {argv!r} raised {type(e).__name__}: {e}") from e
        ran += 1
        lines = r.stderr.strip().splitlines()
        if "--exec" in argv:  # the command's own stderr (sh: not found) is not klog's
            lines = [line for line in lines if line.startswith("klog: ")]
        assert r.exit_code in (0, 1, 2), (argv, r)
        assert "Traceback" not in r.stderr, (argv, r.stderr)
        assert r.exit_code == 0 or len(lines) == 1, (argv, r.stderr)
    print(f"{ran} of {len(cases)} cases ran")
    return ran


def in_scratch_folder(tmp_path, monkeypatch) -> None:
    """Cases run in a folder of their own: a hostile --data-dir such as '@' is a relative path, made there."""
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))  # the default store, should a case reach it
    monkeypatch.setenv("KLOG_CLUSTER_TIMEOUT", "2")


@pytest.mark.slow  # (~13 s: the whole suite runs it; the fast lane keeps the named bad-input tests)
def test_seeded_campaign_over_every_command(cli, data_dir, tmp_path, replay_seed, monkeypatch):
    in_scratch_folder(tmp_path, monkeypatch)
    ran = run_campaign(cli, data_dir, tmp_path, replay_seed(20261128), values_per_parameter=1, budget_s=25,
                       min_cases=100)
    assert ran >= 100, ran


@pytest.mark.slow
def test_seeded_campaign_over_every_command_long(cli, data_dir, tmp_path, replay_seed, monkeypatch):
    in_scratch_folder(tmp_path, monkeypatch)
    ran = run_campaign(cli, data_dir, tmp_path, replay_seed(7), values_per_parameter=4, budget_s=100,
                       min_cases=300)
    assert ran >= 300, ran
