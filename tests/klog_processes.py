"""`python -m klog` as a real process from a test (this tree first on PYTHONPATH), and what the
tests that race such processes share: one call, reading topic `t` back, feeding a rolling producer
while something races it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
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


class _Drained:
    """A process's stdout and stderr, read as they come by a thread each (so it never waits on a full pipe)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.out, self.err = bytearray(), bytearray()
        self._threads = [threading.Thread(target=self._read, args=(pipe, into), daemon=True)
                         for pipe, into in ((proc.stdout, self.out), (proc.stderr, self.err))]
        for thread in self._threads:
            thread.start()

    @staticmethod
    def _read(pipe, into: bytearray) -> None:  # noqa: ANN001 - a pipe of Popen
        while chunk := pipe.read1(1 << 16):
            into += chunk

    def join(self, timeout: float) -> bool:
        """Wait up to `timeout` s for each pipe's end; whether both ended."""
        for thread in self._threads:
            thread.join(timeout)
        return not any(thread.is_alive() for thread in self._threads)


def kill_first_and_finish(procs: list[subprocess.Popen], after_acks: int,
                          timeout: float) -> set[tuple[int, int]]:
    """`procs`: `klog produce --print-offsets` writers racing each other. The first is killed
    (SIGKILL) once it printed `after_acks` acknowledged offsets, while it still runs; the others
    must finish cleanly. Returns the (partition, offset) pairs the killed one acknowledged.

    Every writer's output is read as it comes: a writer whose stdout pipe is full waits, so
    reading one writer's output to its end before the next (as this did) made the writers run
    one after another, and killed the first while it waited on its pipe, never mid-append."""
    victim = procs[0]
    drained = [_Drained(proc) for proc in procs]
    try:
        wait_for(lambda: drained[0].out.count(b"\n") >= after_acks or victim.poll() is not None, timeout,
                 "the first writer's acknowledgements")
        assert victim.poll() is None, f"the first writer ended before the kill: {drained[0].err.decode()}"
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
        deadline = time.monotonic() + timeout
        for proc, output in zip(procs[1:], drained[1:], strict=True):
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            assert output.join(30), "a writer's output did not end"
            assert proc.returncode == 0, output.err.decode()
        assert drained[0].join(30), "the killed writer's output did not end"
    finally:
        for proc in procs:  # (killed first: the threads reading their pipes end before the pipes close)
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
        for output in drained:
            output.join(30)
        for proc in procs:
            stop(proc)
    # (the kill may cut the last line short, "...\t2\t67" of "...\t2\t678": only whole lines count)
    acked_lines = bytes(drained[0].out).split(b"\n")[:-1]
    acked = {(int(p), int(o)) for _, p, o in (line.split(b"\t") for line in acked_lines if line.count(b"\t") == 2)}
    assert len(acked) >= after_acks, "the killed writer acknowledged less than it printed"
    return acked


def race_piped_writers(inputs: list[str], args: list[str], env: dict[str, str], after_acks: int,
                       timeout: float) -> set[tuple[int, int]]:
    """`klog ARGS` (a `produce --print-offsets`) once per input file, all at once, each fed its file
    through a pipe (`cat`: read 64 KiB at a time, so a writer makes many appends, where a file's
    1 MiB reads took all of it at once); then kill_first_and_finish. Returns what the killed
    writer acknowledged."""
    procs, feeders = [], []
    try:
        for path in inputs:
            feeders.append(subprocess.Popen(["cat", path], stdout=subprocess.PIPE))
            procs.append(subprocess.Popen([sys.executable, "-m", "klog", *args], env=env, stdin=feeders[-1].stdout,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE))
            feeders[-1].stdout.close()  # type: ignore[union-attr]
        return kill_first_and_finish(procs, after_acks=after_acks, timeout=timeout)
    finally:
        for proc in procs:  # (a writer started before a later start failed)
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
        for feeder in feeders:
            feeder.kill()
            feeder.wait(30)
