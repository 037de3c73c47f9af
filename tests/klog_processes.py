"""`python -m klog` as a real process from a test (this tree first on PYTHONPATH), and what the
tests that race such processes share: one call, reading topic `t` back, feeding a rolling producer
while something races it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from tests.conftest import REPO

ROLLING_SEGMENT_BYTES = "1000"  # a roll every few records: many background flushes


def klog_env(data_dir: str, **extra: str) -> dict[str, str]:
    return {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO, **extra}


def run_klog(data_dir: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "klog", *args], capture_output=True, text=True,
                          timeout=timeout, env=klog_env(data_dir))


def wait_for(check: Callable[[], object], timeout: float = 30.0, what: str = "the condition") -> object:
    """Poll `check` every 50 ms until it returns something true (returned), for at most `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def require_mount_namespace() -> None:
    """Skip the test unless it may run commands in a private mount namespace (root and unshare(1))."""
    import shutil

    import pytest

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no mount namespace here: {probe.stderr.decode().strip()}")


def stop(proc: subprocess.Popen) -> None:
    """Kill `proc` if it still runs, reap it and close its pipes (a test's `finally`)."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def read_all(data_dir: str) -> list[dict]:
    """Topic `t`'s records as `klog consume --json` prints them."""
    r = run_klog(data_dir, "consume", "t", "--json")
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def race_a_producer(producer: subprocess.Popen, lines: bytes, rounds: int, pause_s: float,
                    race: Callable[[int], None]) -> bytes:
    """Feed a running `klog produce` half of `lines`, run `race` `rounds` times a pause apart (the
    other half fed after the first), then end its input; its stderr. Killed if anything fails."""
    try:
        producer.stdin.write(lines[: len(lines) // 2])  # type: ignore[union-attr]
        producer.stdin.flush()  # type: ignore[union-attr]
        for round_ in range(rounds):
            time.sleep(pause_s)
            race(round_)
            if round_ == 0:
                producer.stdin.write(lines[len(lines) // 2:])  # type: ignore[union-attr]
        return producer.communicate(timeout=120)[1]
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()


def kill_first_and_finish(procs: list[subprocess.Popen], after_s: float,
                          timeout: float) -> set[tuple[int, int]]:
    """`procs`: `klog produce --print-offsets` writers racing each other. The first is killed
    (SIGKILL) `after_s` after it acknowledged its first batch; the others must finish cleanly.
    Returns the (partition, offset) pairs the killed one acknowledged."""
    victim = procs[0]
    first = victim.stdout.readline()  # type: ignore[union-attr]
    assert first, victim.stderr.read().decode()  # type: ignore[union-attr]
    time.sleep(after_s)
    victim.send_signal(signal.SIGKILL)
    # (the kill may cut the last line short, "...\t2\t67" of "...\t2\t678": only whole lines count)
    acked_lines = [first] + victim.stdout.read().split(b"\n")[:-1]  # type: ignore[union-attr]
    victim.wait(timeout=30)
    for proc in procs[1:]:
        _, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err.decode()
    acked = {(int(p), int(o)) for _, p, o in (line.split(b"\t") for line in acked_lines if line.count(b"\t") == 2)}
    assert acked, "the killed writer acknowledged nothing before the kill"
    return acked
