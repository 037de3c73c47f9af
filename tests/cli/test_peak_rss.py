"""tests/peak_rss.py: a child's peak RSS is its own, not that of the large process that started it."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.peak_rss import run_measured

BALLAST_MIB = 300


def _resident_ballast() -> bytearray:
    ballast = bytearray(BALLAST_MIB << 20)
    for i in range(0, len(ballast), 4096):  # (touched: a calloc'd page is not resident until written)
        ballast[i] = 1
    return ballast


def test_a_small_child_of_a_large_process_reports_its_own_peak() -> None:
    ballast = _resident_ballast()
    got = run_measured([sys.executable, "-c", "pass"])
    assert got.returncode == 0 and got.peak_rss_mib < 100, got
    # what the probe is for: the same child waited for directly reports this process's size
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    _, _, usage = os.wait4(proc.pid, 0)
    assert usage.ru_maxrss / 1024 > BALLAST_MIB, usage.ru_maxrss
    del ballast


def test_a_child_that_grows_reports_its_growth_and_its_exit() -> None:
    got = run_measured([sys.executable, "-c", "import sys; b = b'x' * (200 << 20); sys.stderr.write('big'); "
                        "sys.exit(3)"])
    assert got.returncode == 3 and got.said == "big", got
    assert got.peak_rss_mib > 200 and got.cpu_s > 0, got


def test_stdin_comes_from_the_path_given(tmp_path) -> None:
    path = tmp_path / "in"
    path.write_bytes(b"hello")
    got = run_measured([sys.executable, "-c", "import sys; sys.exit(sys.stdin.read() != 'hello')"],
                       stdin_path=str(path))
    assert got.returncode == 0, got
