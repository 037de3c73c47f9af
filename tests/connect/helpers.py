"""What the connect tests share: a worker run in-process until a condition holds, bounded in time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from contextlib import contextmanager

import klog
from tests.klog_processes import wait_for  # noqa: F401 - the connect tests import it from here

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))




@contextmanager
def running(data_dir: str, *configs: dict, worker: dict | None = None, warnings: list | None = None):
    """A Worker over the store at data_dir running `configs`; stopped (offsets committed) on exit."""
    from klog.connect.worker import Worker

    store = klog.open(data_dir)
    w = Worker(store, {"offset.flush.interval.ms": "200", **(worker or {})},
               warn=(warnings.append if warnings is not None else lambda m: None))
    try:
        for c in configs:
            w.start(w.validate(c))
        yield w
    finally:
        w.stop()
        store.close()


def records(data_dir: str, topic: str) -> list:
    with klog.open(data_dir) as s:
        if not s.has_topic(topic):
            return []
        return list(s.consumer(topic))


def values(data_dir: str, topic: str) -> list:
    return [r.value for r in records(data_dir, topic)]


def write_config(path: str, config: dict) -> str:
    with open(path, "w") as f:
        json.dump(config, f)
    return path


def start_cli(data_dir: str, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "klog", "connect", "run", "--listen", "127.0.0.1:0", *args],
                            env={**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO, **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_started(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """Until the worker's start-up line (read from its stderr), or its exit. A worker silent past
    `timeout` is killed (its stderr then ends: a readline never waits forever) and the test fails."""
    assert proc.stderr is not None
    fired = threading.Event()

    def kill() -> None:
        fired.set()
        proc.kill()

    watchdog = threading.Timer(timeout, kill)
    watchdog.start()
    try:
        while line := proc.stderr.readline().decode():
            if "klog connect: running" in line:
                return
    finally:
        watchdog.cancel()
    if fired.is_set():
        raise AssertionError(f"the worker did not start within {timeout} s (killed)")


def stop_cli(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30.0) -> tuple[int, str]:
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err.decode()
