"""Shared fixtures: a fresh store per test, and two ways to run the CLI (in-process, subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

import klog

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    path = str(tmp_path / "data")
    monkeypatch.setenv("KLOG_DATA_DIR", path)
    return path


@pytest.fixture
def store(data_dir):
    s = klog.open(data_dir)
    yield s
    s.close()


@dataclass
class Result:
    exit_code: int
    stdout: bytes
    stderr: str

    @property
    def out(self) -> str:
        return self.stdout.decode("utf-8", "replace")


@pytest.fixture
def cli(data_dir, capfdbinary):
    """Run `klog ARGS` in this process (stdin from a file via `input`); returns a Result."""
    from klog.cli.app import run

    def invoke(*args: str, input: bytes | None = None) -> Result:
        capfdbinary.readouterr()
        old_stdin = sys.stdin
        if input is not None:
            path = os.path.join(data_dir + ".stdin")
            with open(path, "wb") as f:
                f.write(input)
            sys.stdin = open(path)  # noqa: SIM115 - restored below
        try:
            code = run(list(args))
            sys.stdout.flush()
        finally:
            if input is not None:
                sys.stdin.close()
                sys.stdin = old_stdin
        captured = capfdbinary.readouterr()
        return Result(int(code), captured.out, captured.err.decode("utf-8", "replace"))

    return invoke


@pytest.fixture
def klog_proc(data_dir):
    """Run `python -m klog ARGS` as a real process (pipes, signals, exit codes)."""

    def invoke(*args: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
        return subprocess.run([sys.executable, "-m", "klog", *args], input=input, capture_output=True,
                              timeout=timeout, env=env)

    return invoke


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession shared by every Spark test (starting one costs ~10 s); tests pass dataDir."""
    pytest.importorskip("pyspark")
    from klog.spark.session import SessionSettings, start_session

    # no JVM class archive: recording it would add ~15 s at the end of the test run
    session = start_session(SessionSettings(master="local[2]", class_cache=False))
    yield session
    session.stop()


@pytest.fixture
def kafka_server(data_dir):
    """`klog serve` in this process (a background thread) on 127.0.0.1 and an ephemeral port;
    `kafka_server.bootstrap` is 'host:port'. Stopped (connections closed, store closed) after the test."""
    from klog.server import Server

    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        server.bootstrap = f"127.0.0.1:{server.port}"
        yield server


# -- CI: a test file that vanishes is a failure -------------------------------------------------
def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """With CI set (as .ci/run sets it), a test module skipped as a whole at import (a module-level
    pytest.importorskip of a test extra that is not installed) fails instead: in CI every extra
    is installed, so a skip there means a file's tests silently stopped running."""
    outcome = yield
    report = outcome.get_result()
    if _in_ci() and report.skipped and isinstance(collector, pytest.Module):
        report.outcome = "failed"
        report.longrepr = f"{collector.nodeid}: skipped at import in CI ({report.longrepr}); install the test extras"


# -- random schedules replay: KLOG_TEST_SEED, and the seed named in a failure's report ---------------
SEED_ENV = "KLOG_TEST_SEED"


@pytest.fixture
def replay_seed(request):
    """`replay_seed(default)` -> the seed a test's random schedule uses: $KLOG_TEST_SEED when set (to
    replay a failure), else `default`. A failing test's report ends with the line that reproduces it."""

    def choose(default: int) -> int:
        text = os.environ.get(SEED_ENV, "").strip()
        seed = int(text) if text else default
        request.node.user_properties.append(("seed", seed))
        return seed

    return choose


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    seeds = [value for name, value in item.user_properties if name == "seed"]
    if report.failed and seeds:
        report.sections.append(("random schedule", f"reproduce with: {SEED_ENV}={seeds[-1]} "
                                                   f"python -m pytest '{item.nodeid}'"))


# -- CI runs the suite on two workers (pytest-xdist, --dist loadgroup): what shares one costly ------------
# process runs on one worker, so the JVM and the PostgreSQL server each start once
def pytest_collection_modifyitems(config, items):
    for item in items:
        names = getattr(item, "fixturenames", ())
        if item.get_closest_marker("spark") or "spark" in names:
            item.add_marker(pytest.mark.xdist_group("spark"))
        elif "pg_server" in names or "pg_db" in names:
            item.add_marker(pytest.mark.xdist_group("postgres"))
