"""Stopping `klog spark ...` with SIGTERM or Ctrl-C leaves nothing running.

Goal: a signal at any instant (Spark's launcher just started, the JVM starting, a job running in a
Python worker) ends the command with exit 143 (SIGTERM) or 130 (SIGINT) and one line on stderr, no
traceback, and the JVM and Spark's Python workers it started end too; so does `kill -9` of klog. A
stream stops cleanly on either signal (its summary line, then the signal's).
Method: klog runs as a subprocess in its own session; the test sends the signal to klog's process
group, as a terminal's Ctrl-C or `timeout` does. The processes started for the run are found as
klog's descendants in /proc (polled, time-bounded), recorded at the signal, and each must be gone
(or a zombie) within a bound afterwards. Whatever is still there at the end is killed by its pid.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

pytestmark = [pytest.mark.spark, pytest.mark.slow,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")]

from tests.conftest import REPO  # noqa: E402 - after the importorskip

START_SECONDS = 90.0  # a loaded 2-core machine starts Spark in 10-40 s
GONE_SECONDS = 20.0


def _processes() -> dict[int, tuple[int, str, str, int]]:
    """pid -> (parent pid, state, command line, session id) of every process."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        found[int(name)] = (int(fields[1]), fields[0], cmd, int(fields[3]))
    return found


def _descendants(pid: int) -> dict[int, str]:
    procs = _processes()
    found, grew = {pid}, True
    while grew:
        grew = False
        for p, (parent, *_) in procs.items():
            if parent in found and p not in found:
                found.add(p)
                grew = True
    found.discard(pid)
    return {p: procs[p][2] for p in found}


def _alive(klog: int, started) -> dict[int, str]:  # noqa: ANN001 - pids
    """The live processes of the run: those in `started`, and any in klog's session or in a session one of
    them leads (the JVM's: it may start after the signal, when klog is no longer its parent)."""
    sessions = {klog, *started}
    return {p: cmd for p, (_, state, cmd, sid) in _processes().items()
            if state != "Z" and p != klog and (p in started or sid in sessions)}


def _start(args: list[str], data_dir: str, **env_extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": REPO, "KLOG_DATA_DIR": data_dir, "KLOG_SPARK_CDS": "0",  # (no first-start line)
           **env_extra}
    return subprocess.Popen([sys.executable, "-m", "klog", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, start_new_session=True)


def _wait_until(proc: subprocess.Popen, ready) -> dict[int, str]:  # noqa: ANN001 - callable(descendants)
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline and proc.poll() is None:
        found = _descendants(proc.pid)
        if ready(found):
            return found
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"klog exited ({proc.returncode}) or never reached the instant: {proc.communicate()}")


def _assert_all_end(klog: int, started: dict[int, str]) -> None:
    deadline = time.monotonic() + GONE_SECONDS
    while _alive(klog, started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _alive(klog, started) == {}


def _end_run(proc: subprocess.Popen, started: dict[int, str]) -> None:
    """A test's clean-up: klog killed if it still runs, then whatever of its run is left."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pid in _alive(proc.pid, started):  # only the processes of this run
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _stop_and_check(proc: subprocess.Popen, sig: int, started: dict[int, str], group: bool = True) -> None:
    """Signal klog's process group (else klog alone); one line and the exit code; the run's processes end."""
    try:
        os.killpg(proc.pid, sig) if group else os.kill(proc.pid, sig)
        out, err = proc.communicate(timeout=60)
        code, line = {signal.SIGTERM: (143, "klog: terminated"), signal.SIGINT: (130, "klog: interrupted"),
                      signal.SIGKILL: (-9, None)}[sig]
        assert proc.returncode == code, err
        if line is not None:
            assert err.decode() == line + "\n"
            assert b"finished" not in out
        _assert_all_end(proc.pid, started)
    finally:
        _end_run(proc, started)


@pytest.fixture
def topic(store) -> str:
    store.create_topic("t1", partitions=1)
    with store.producer() as producer:
        producer.send("t1", b"a")
    return "t1"


def _java(found: dict[int, str]) -> bool:
    return any("java" in cmd.split(" ", 1)[0] for cmd in found.values())


@pytest.mark.parametrize(("sig", "instant", "group"), [
    (signal.SIGTERM, "launcher", False),  # spark-submit just started: no JVM yet
    (signal.SIGTERM, "jvm", False),  # `kill PID` while the JVM starts, its gateway not up
    (signal.SIGINT, "jvm", True),  # Ctrl-C then
    (signal.SIGKILL, "jvm", False),  # klog killed: nothing can clean up but the kernel (PR_SET_PDEATHSIG)
])
def test_signal_while_spark_starts_leaves_no_jvm(data_dir, topic, sig, instant, group) -> None:
    proc = _start(["spark", "sql", f"SELECT count(*) AS finished FROM {topic}"], data_dir)
    started = _wait_until(proc, (lambda found: bool(found)) if instant == "launcher" else _java)
    if instant == "jvm":
        time.sleep(1.0)
        started.update(_descendants(proc.pid))
    _stop_and_check(proc, sig, started, group)


def test_a_killed_commands_scratch_directory_goes_with_the_next_command(data_dir, topic, tmp_path) -> None:
    """klog killed with -9 cannot remove its scratch directory (klog-spark-* in $TMPDIR: Spark's local
    dirs, the launcher): the next `klog spark` command does, and leaves its own and a live one's alone."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = _start(["spark", "sql", f"SELECT count(*) AS finished FROM {topic}"], data_dir, TMPDIR=str(scratch))
    started = _wait_until(proc, _java)
    _stop_and_check(proc, signal.SIGKILL, started, group=False)
    left = sorted(p.name for p in scratch.iterdir())
    assert len(left) == 1 and left[0].startswith("klog-spark-"), left
    proc = _start(["spark", "sql", f"SELECT count(*) AS n FROM {topic}"], data_dir, TMPDIR=str(scratch))
    started = _wait_until(proc, _java)
    try:
        assert sorted(p.name for p in scratch.iterdir() if p.name != left[0]) != []  # its own, while it runs
        out, err = proc.communicate(timeout=START_SECONDS)
        assert (proc.returncode, out) == (0, b'{"n": 1}\n'), err
        assert list(scratch.iterdir()) == []  # the killed one's went at its start, its own at its exit
    finally:
        _end_run(proc, started)


JOB = """\
import sys
import time

marker = sys.argv[1]


def slow(rows):
    open(marker, "w").close()
    time.sleep(300)
    yield from rows


spark.sparkContext.parallelize([1], 1).mapPartitions(slow).count()
print("finished")
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_signal_during_a_job_leaves_no_jvm_or_python_worker(data_dir, tmp_path, sig) -> None:
    script, marker = tmp_path / "job.py", tmp_path / "in-the-job"
    script.write_text(JOB)
    proc = _start(["spark", "run", str(script), str(marker), "--master", "local[1]"], data_dir)
    started = _wait_until(proc, lambda found: marker.exists())
    started.update(_descendants(proc.pid))
    workers = [cmd for cmd in started.values() if "pyspark" in cmd and not cmd.startswith(("bash", "/bin"))
               and "java" not in cmd.split(" ", 1)[0]]
    assert _java(started) and workers, started  # the JVM and the worker running `slow`
    _stop_and_check(proc, sig, started)


def test_a_finished_command_leaves_no_jvm(data_dir, topic) -> None:
    proc = _start(["spark", "sql", f"SELECT count(*) AS n FROM {topic}"], data_dir)
    started = _wait_until(proc, _java)
    try:
        out, err = proc.communicate(timeout=START_SECONDS)
        # stderr: Spark's own WARN lines may show on a loaded machine while it stops (TransportChannelHandler)
        assert (proc.returncode, out) == (0, b'{"n": 1}\n') and b"Traceback" not in err, err
        _assert_all_end(proc.pid, started)
    finally:
        _end_run(proc, started)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stream_stops_cleanly_on_either_signal(data_dir, topic, tmp_path, sig) -> None:
    """SIGTERM (`timeout`, a service manager) stops a running stream as Ctrl-C does: the running batch
    finishes, the summary line, then the signal's line and exit code."""
    proc = _start(["spark", "stream", "--from", topic, "--to", "copied", "--sql", "SELECT value FROM source",
                   "--checkpoint", str(tmp_path / "ck")], data_dir)
    started: dict[int, str] = {}
    watchdog = threading.Timer(START_SECONDS, proc.kill)  # bounds the blocking reads below
    watchdog.start()
    try:
        assert proc.stderr.readline().startswith(b"streaming t1 -> copied")
        started = _descendants(proc.pid)
        os.killpg(proc.pid, sig)
        err = proc.stderr.read().decode().splitlines()
        assert proc.wait(60) == (143 if sig == signal.SIGTERM else 130)
        assert len(err) == 2 and err[0].startswith("streamed ") and " from t1 to copied " in err[0], err
        assert err[1] == ("klog: terminated" if sig == signal.SIGTERM else "klog: interrupted")
        _assert_all_end(proc.pid, started)
    finally:
        watchdog.cancel()
        _end_run(proc, started)


STAGED_WRITE = """\
import glob
import os
import sys
import time

from pyspark.sql.types import StringType, StructField, StructType

marker = sys.argv[1]
roots = [os.environ.get("KLOG_SPARK_STAGING") or "-", os.path.join(os.environ["KLOG_DATA_DIR"], "spark", "staging")]


def rows(i, it):
    if i == 1:  # once the other task staged its rows: hang, the write not committed
        deadline = time.time() + 60
        while time.time() < deadline and not [f for r in roots for f in glob.glob(r + "/*/*.arrow")]:
            time.sleep(0.1)
        open(marker, "w").close()
        time.sleep(300)
    yield (f"v{i}",)


df = spark.createDataFrame(spark.sparkContext.parallelize([0, 1], 2).mapPartitionsWithIndex(rows),
                           StructType([StructField("value", StringType())]))
df.write.format("klog").option("topic", "out").option("transactional.id", "tx").mode("append").save()
print("finished")
"""


def test_a_stopped_transactional_write_leaves_no_staged_rows(data_dir, store, tmp_path) -> None:
    """SIGTERM while a transactional batch write waits for its last task: the rows the other task staged
    (an Arrow file) go with the command; they stayed in <data dir>/spark/staging for good."""
    store.create_topic("out", partitions=1)
    script, marker, scratch = tmp_path / "job.py", tmp_path / "in-the-job", tmp_path / "tmp"
    script.write_text(STAGED_WRITE)
    scratch.mkdir()
    proc = _start(["spark", "run", str(script), str(marker), "--master", "local[2]"], data_dir, TMPDIR=str(scratch))
    started = _wait_until(proc, lambda found: marker.exists())
    started.update(_descendants(proc.pid))
    _stop_and_check(proc, signal.SIGTERM, started)
    assert glob.glob(os.path.join(data_dir, "spark", "staging", "*", "*")) == []
    assert list(scratch.iterdir()) == []  # the work dir, with what was staged in it
    assert list(store.consumer("out")) == []

