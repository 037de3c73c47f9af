"""Every klog command against bad input, as a real process: one error line on stderr, exit 2 for bad
input (1 for a runtime failure), never a traceback, and the store still verifies afterwards.
A seeded campaign over every command (klog.cli.gendocs.walk_commands) and the cases it found."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.klog_processes import klog_env


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
def test_a_closed_stdin_is_named_not_a_traceback(data_dir):
    assert run_shell(data_dir, "echo a | klog produce t").returncode == 0
    assert_error_line(run_shell(data_dir, "klog produce t <&-"), 1, "standard input is closed")
    assert_error_line(run_shell(data_dir, "klog users add bob <&-"), 1, "standard input is closed")
    # a command that does not read stdin does not care
    assert run_shell(data_dir, "klog consume t -e <&-").stdout == "a\n"
    assert_store_verifies(data_dir)


def test_a_closed_stdout_is_named_and_nothing_is_committed(data_dir):
    assert run_shell(data_dir, "printf 'a\\nb\\n' | klog produce t").returncode == 0
    for command in ("klog topics list", "klog offsets t", "klog groups list", "klog consume t -e",
                    "klog consume t -e --json", "klog consume t -e -G g", "klog verify"):
        assert_error_line(run_shell(data_dir, f"{command} >&-"), 1, "standard output is closed")
    # the group printed nothing, so it committed nothing
    assert_error_line(run_shell(data_dir, "klog groups describe g"), 1, "unknown group 'g'")
    # what writes only to stderr still works
    r = run_shell(data_dir, "klog topics create u >&-")
    assert (r.returncode, r.stderr) == (0, "Created topic u (1 partition, replication factor 1)\n")
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
