"""Starting Spark's JVM without its noise: the master URL checked first, the JVM's stderr filtered.

While the JVM starts, its stderr is a pipe this process reads. What it writes then is held: if the
start fails (a bad --conf, an unusable master) the held text yields one line naming the first real
error instead of a launcher stack trace; if it succeeds the held text is written out and later
output is forwarded as it comes, in raw chunks, so Spark's `\\r` progress bar reaches the terminal.
Only complete lines that match JVM_NOISE are dropped.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from klog.errors import SparkUnavailableError, UsageError

JVM_NOISE = ("Using incubator modules",)  # a JVM line log4j cannot silence (spark-notes gotcha 7)
EOF_WAIT_SECONDS = 10.0  # after a failed start: how long to wait for the dead JVM's last output

# the masters Spark 4 accepts (SparkSubmit and SparkContext's regexes; Mesos is gone since Spark 4.0)
_MASTER = re.compile(r"local|local\[(\*|[1-9]\d*)(\s*,\s*\d+)?\]|local-cluster\[\s*\d+\s*,\s*\d+\s*,\s*\d+\s*\]"
                     r"|yarn|(spark|k8s)://\S+")
_LOCAL = re.compile(r"local(\[.*\])?|local-cluster\[.*\]")
_STACK_LINE = re.compile(r"^(at |\.\.\. \d+ more|Caused by: |Suppressed: |WARNING: |Usage: |"
                         r"\d\d:\d\d:\d\d (WARN|INFO|DEBUG) |Error: (Could not create the Java|A fatal exception))")
_THREAD = re.compile(r'^Exception in thread "[^"]*" ')
_EXCEPTION_CLASS = re.compile(r"^([a-z_$][\w$]*\.)+[A-Z][\w$]*(Exception|Error)(: |$)")
_LOG_PREFIX = re.compile(r"^\d\d:\d\d:\d\d (ERROR|FATAL) [\w$.]+: ")


def check_master(master: str) -> None:
    """A master URL Spark would reject is a usage error here, before a JVM starts."""
    if not _MASTER.fullmatch(master.strip()):
        raise UsageError(f"invalid --master '{master}': use local, local[N], local[*], local[N,F], "
                         "local-cluster[N,C,M], spark://HOST:PORT, yarn or k8s://URL")


def is_local(master: str) -> bool:
    """local, local[...] and local-cluster[...]: every process is on this machine."""
    return bool(_LOCAL.fullmatch(master.strip()))


def launch_failure_line(text: str) -> str | None:
    """The first line of a failed JVM start that says what went wrong, without exception class names."""
    for raw in text.splitlines():
        line = raw.strip().replace("\r", "")
        if not line or _STACK_LINE.match(line) or any(n in line for n in JVM_NOISE):
            continue
        line = _LOG_PREFIX.sub("", _THREAD.sub("", line))
        line = _EXCEPTION_CLASS.sub("", line)
        line = line.removeprefix("Error: ").strip()
        if line:
            return line
    return None


class NoiseFilter:
    """Bytes in, bytes out: complete lines matching JVM_NOISE are dropped, everything else passes at once.

    A partial line is held only while it could still become a noise line (no carriage return in it:
    terminal output such as the progress bar always has one) and goes out with its newline.
    """

    def __init__(self, noise: tuple[str, ...] = JVM_NOISE) -> None:
        self.noise = tuple(n.encode() for n in noise)
        self.pending = b""

    def _keep(self, line: bytes) -> bytes:
        head, sep, last = line.rpartition(b"\r")
        if any(n in last for n in self.noise):
            return head + sep  # a progress bar's carriage returns before a noise line still go out
        return line

    def feed(self, chunk: bytes) -> bytes:
        data = self.pending + chunk
        self.pending = b""
        lines = data.split(b"\n")
        tail = lines.pop()
        out = b""
        for line in lines:
            kept = self._keep(line)
            out += line + b"\n" if kept == line else kept  # a noise line goes with its newline
        if b"\r" in tail:
            out += tail
        else:
            self.pending = tail
        return out

    def flush(self) -> bytes:
        tail, self.pending = self.pending, b""
        return self._keep(tail)


class StderrPump:
    """The thread between the JVM's stderr pipe and this process's stderr (fd `out`)."""

    def __init__(self, read_fd: int, out: int, noise_filter: NoiseFilter | None = None) -> None:
        self.read_fd, self.out = read_fd, out
        self.filter = noise_filter or NoiseFilter()
        self.lock = threading.Lock()
        self.holding = True
        self.muted = False
        self.held = b""
        self.thread = threading.Thread(target=self._run, name="klog-jvm-stderr", daemon=True)

    def start(self) -> StderrPump:
        self.thread.start()
        return self

    def _emit(self, data: bytes) -> None:
        if not data:
            return
        with self.lock:
            if self.muted:
                return
            if self.holding:
                self.held += data
                return
        try:
            os.write(self.out, data)
        except OSError:
            pass

    def _run(self) -> None:
        try:
            while chunk := os.read(self.read_fd, 65536):
                self._emit(self.filter.feed(chunk))
            self._emit(self.filter.flush())
        except OSError:
            pass
        finally:
            os.close(self.read_fd)

    def release(self) -> None:
        """Started: write what was held, and forward from now on."""
        with self.lock:
            held, self.held, self.holding = self.held, b"", False
        if held:
            os.write(self.out, held)

    def mute(self) -> None:
        """From now on the JVM's output goes nowhere (Spark stopping after a Ctrl-C logs the tasks it kills)."""
        with self.lock:
            self.muted, self.held = True, b""

    def drop(self, wait_for_eof: bool) -> str:
        """A failed start: the held text (after the JVM's end, if it exited), which is not written out."""
        if wait_for_eof:
            self.thread.join(EOF_WAIT_SECONDS)
        with self.lock:
            held, self.held, self.holding = self.held, b"", False
        return held.decode("utf-8", "replace")


@contextmanager
def jvm_stderr(enabled: bool) -> Iterator[StderrPump | None]:
    """While the JVM starts, give it a pipe as stderr (its children inherit fd 2) read by a StderrPump.

    On leaving, this process's own stderr is back on fd 2; only the JVM keeps the pipe. The caller
    calls release() once the JVM is up, or drop() when it failed.
    """
    if not enabled:
        yield None
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield None
        return
    read_fd, write_fd = os.pipe()
    pump = StderrPump(read_fd, saved).start()
    os.dup2(write_fd, 2)
    try:
        yield pump
    finally:
        os.dup2(saved, 2)
        os.close(write_fd)


def gateway_exited(exc: BaseException) -> bool:
    """PySpark's JAVA_GATEWAY_EXITED: the JVM (or spark-submit) ended before it was up."""
    get_condition = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    return callable(get_condition) and get_condition() == "JAVA_GATEWAY_EXITED"


def launch_error(stderr_text: str | None) -> SparkUnavailableError:
    """One line for a JVM that exited while starting: the first real error it printed."""
    line = launch_failure_line(stderr_text or "")
    if line is not None:
        return SparkUnavailableError(f"Spark's JVM did not start: {line}")
    hint = "see its output above" if stderr_text is None else "run with --verbose to see its output"
    return SparkUnavailableError(f"Spark's JVM exited while starting ({hint})")


# The program Popen runs in place of spark-submit (pyspark's launch_gateway takes `executable` in its
# popen_kwargs; it sets its own preexec_fn, so the set-up happens here, before exec): the JVM gets its own
# session and process group (a Ctrl-C or `timeout`'s SIGTERM to klog's group reaches klog, which stops
# Spark, not the JVM in the middle of a call), and on Linux PR_SET_PDEATHSIG: the JVM gets SIGTERM when
# the thread that started it ends, so it cannot outlive klog, even a klog killed while the JVM starts
# (before Spark's own guard, the gateway exiting when its stdin closes, is up).
_LAUNCHER_CODE = """\
import os, sys
os.setsid()
if sys.platform == "linux":
    try:
        import ctypes, signal
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass
if os.getppid() != {parent}:  # klog ended before the line above: do not start Spark at all
    sys.exit(143)
os.execv({submit!r}, [{submit!r}] + sys.argv[1:])
"""


def launcher(work_dir: str, spark_submit: str) -> str | None:
    """A `sh` script in work_dir that runs spark-submit as _LAUNCHER_CODE says; None where it cannot run
    (not POSIX, a noexec work_dir): then pyspark starts spark-submit itself."""
    if os.name != "posix" or os.statvfs(work_dir).f_flag & os.ST_NOEXEC:
        return None
    import shlex

    code = _LAUNCHER_CODE.format(parent=os.getpid(), submit=spark_submit)
    path = os.path.join(work_dir, "spark-submit")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n# klog: spark-submit in its own process group, ended with klog (klog/spark/launch.py)\n"
                f"exec {shlex.quote(sys.executable)} -I -S -c {shlex.quote(code)} \"$@\"\n")
    os.chmod(path, 0o755)
    return path


def start_gateway(conf: dict[str, str], work_dir: str) -> None:
    """Start Spark's JVM and its py4j gateway as SparkContext would (launch_gateway with the builder's
    conf), through launcher(); the SparkContext created next finds it. Nothing when a gateway is up."""
    from pyspark import SparkConf, SparkContext
    from pyspark.find_spark_home import _find_spark_home
    from pyspark.java_gateway import launch_gateway

    with SparkContext._lock:
        if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
            return
        spark_conf = SparkConf()
        for key, value in conf.items():
            spark_conf.set(key, value)
        popen_kwargs = {}
        # PR_SET_PDEATHSIG follows the starting thread: only the main thread lives as long as the process
        if threading.current_thread() is threading.main_thread():
            path = launcher(work_dir, os.path.join(_find_spark_home(), "bin", "spark-submit"))
            if path is not None:
                popen_kwargs["executable"] = path
        import tempfile

        # pyspark's connection-info directory (a mkdtemp it removes once the JVM is up) goes into the work
        # dir: a klog killed while the JVM starts leaves it there, where the next start's sweep finds it
        saved, tempfile.tempdir = tempfile.tempdir, work_dir
        try:
            gateway = launch_gateway(spark_conf, popen_kwargs=popen_kwargs)
        finally:
            tempfile.tempdir = saved
        SparkContext._gateway = gateway  # what SparkContext._ensure_initialized does with its own launch
        SparkContext._jvm = gateway.jvm

