"""Spark errors as klog errors: one line for the user, never a JVM or worker stack trace.

A klog error raised inside Spark's Python workers (planning or reading) reaches the driver as a
Spark exception whose message holds the worker's traceback; its last line names the klog error.
"""

from __future__ import annotations

import os
import re
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from klog import errors
from klog.errors import KlogError

_KLOG_LINE = re.compile(r"klog\.errors\.(\w+): (.+)")
_SPARK_CLASS = re.compile(r"^\[([A-Z_.]+)\]\s*")
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+.*$")
CAUSES_MAX = 20  # how deep to follow a Java exception's causes


def from_spark(exc: BaseException) -> KlogError:
    """The KlogError a Spark exception carries, else a KlogError with its first meaningful line.

    A Py4JJavaError's own message only names the JVM call ("An error occurred while calling
    o102.getResult"); its Java exception's innermost cause says what went wrong.
    """
    causes = java_messages(exc)
    text = "\n".join([_text(exc), *causes])
    found = _KLOG_LINE.findall(text)
    if found:
        name, message = found[-1]
        cls = getattr(errors, name, KlogError)
        if not (isinstance(cls, type) and issubclass(cls, KlogError)):
            cls = KlogError
        error = cls.__new__(cls)
        Exception.__init__(error, message.strip())
        return error
    line = _first_line(_innermost(causes) if causes else text)
    if line.startswith(_WORKER_FAILED):  # the Python traceback that follows says what failed
        line = _worker_error(text + "\n" + "\n".join(causes)) or line
    return errors.KlogError(f"Spark: {line}")


_WORKER_FAILED = "An exception was thrown from the Python worker"
# klog's own frames, by where the package is (not any path with a "klog" folder: a user's ~/klog/job.py is theirs)
_KLOG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))).replace(os.sep, "/") + "/"
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+)')


def _worker_error(text: str) -> str | None:
    """The error a Python worker's traceback in `text` ends with, and the last frame of the user's code
    (not pyspark's, py4j's or klog's): 'a Python worker failed: ZeroDivisionError: division by zero
    (job.py, line 3)'. None without a traceback."""
    lines = text.splitlines()
    starts = [i for i, raw in enumerate(lines) if raw.strip() == "Traceback (most recent call last):"]
    if not starts:
        return None
    where = error = None
    for raw in lines[starts[-1] + 1:]:
        frame = _FRAME.match(raw)
        if frame:
            path = frame.group(1).replace(os.sep, "/")
            if not any(f"/{lib}/" in path for lib in ("pyspark", "py4j")) and not path.startswith(("<", _KLOG_DIR)):
                where = f"{frame.group(1)}, line {frame.group(2)}"
        elif raw.strip() and not raw[:1].isspace():
            error = raw.strip()
            break
    if error is None:
        return None
    return f"a Python worker failed: {error}" + (f" ({where})" if where else "")


def java_messages(exc: BaseException) -> list[str]:
    """The messages of a Py4JJavaError's Java exception and its causes, outermost first (empty ones left out)."""
    java = getattr(exc, "java_exception", None)
    out: list[str] = []
    try:
        for _ in range(CAUSES_MAX):
            if java is None:
                break
            message = java.getMessage()
            if message is not None and str(message).strip():
                out.append(str(message))
            java = java.getCause()
    except Exception:  # noqa: BLE001 - the JVM is gone: keep what was read
        pass
    return out


def _innermost(messages: list[str]) -> str:
    """The innermost cause's message, or its parent's when that only adds a context prefix
    ('Cannot run program "x": ' + 'error=2, No such file or directory')."""
    firsts = [m.strip().splitlines()[0] for m in messages]
    i = len(firsts) - 1
    while i > 0 and firsts[i - 1].endswith(": " + firsts[i]):
        head = firsts[i - 1][:-len(firsts[i]) - 2]
        if not head or ": " in head:  # e.g. "Job aborted due to stage failure: ...": not a mere prefix
            break
        i -= 1
    return messages[i]


def _text(exc: BaseException) -> str:
    try:
        return str(exc)  # a Py4JJavaError asks the JVM for its text
    except Exception:  # noqa: BLE001
        return getattr(exc, "errmsg", "") or type(exc).__name__


def _first_line(text: str) -> str:
    """The first line that is not a traceback, without Spark's [ERROR_CLASS] prefix and SQLSTATE suffix."""
    in_traceback = False
    for raw in text.splitlines():
        if raw.startswith("Traceback"):
            in_traceback = True  # a Python traceback: its error is the first line not indented after it
            continue
        if in_traceback and (raw[:1].isspace() or not raw.strip()):
            continue
        in_traceback = False
        line = _SQLSTATE.sub("", _SPARK_CLASS.sub("", raw.strip()))
        if line and not line.startswith(("Traceback", "File ", "JVM stacktrace", "at ")):
            return line
    return text.strip() or "unknown error"


@contextmanager
def spark_errors() -> Iterator[None]:
    """Turn Spark's exceptions (analysis, worker, streaming query, Py4J) into KlogErrors."""
    try:
        yield
    except KlogError:
        raise
    except Exception as e:
        if not is_spark_error(e):
            raise
        raise from_spark(e) from None


def is_spark_error(exc: BaseException) -> bool:
    module = type(exc).__module__ or ""
    return module.startswith(("pyspark.", "py4j."))


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_watch: StopWatch | None = None  # the running command's (stop_wins())


class StopWatch:
    """Which stop signals (Ctrl-C, SIGTERM) the process received while a Spark command ran.

    Each handler in place for them is wrapped: the wrapper notes the signal, then calls the handler
    (klog's SIGTERM handler, PySpark's SIGINT handler: both raise KeyboardInterrupt). watch() wraps
    again the handlers installed since (SparkContext installs its SIGINT handler while it starts)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.restore: dict[int, object] = {}

    def note(self, signum: int) -> None:
        self.received.append(signum)

    def watch(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in STOP_SIGNALS:
            handler = signal.getsignal(sig)
            if not callable(handler) or getattr(handler, "klog_stop_watch", None) is self:
                continue  # ignored or the default action: no Python code runs for it to replace
            self.restore.setdefault(sig, handler)

            def noted(signum: int, frame: object, handler=handler) -> None:  # noqa: ANN001
                self.note(signum)
                handler(signum, frame)

            noted.klog_stop_watch = self
            signal.signal(sig, noted)

    def close(self) -> None:
        for sig, handler in self.restore.items():
            signal.signal(sig, handler)


def stop_received() -> bool:
    """Whether the running command received Ctrl-C or SIGTERM (see stop_wins)."""
    return _watch is not None and bool(_watch.received)


def note_stop(signum: int) -> None:
    """A handler of the command's own (a stream's stop flag) received a stop signal."""
    if _watch is not None:
        _watch.note(signum)


@contextmanager
def stop_wins() -> Iterator[StopWatch]:
    """A stop signal received means the command ends as stopped (exit 130 or 143, its one line), whatever
    error follows it: the KeyboardInterrupt a handler raises unwinds through PySpark's and py4j's clean-up
    code, whose own JVM calls then fail (py4j shuts the interrupted call's connections down: "Answer from
    Java side is empty") and replace it. An error with no signal received stays that error."""
    global _watch
    outer, _watch = _watch, StopWatch()
    watch = _watch
    watch.watch()
    try:
        yield watch
    except Exception:
        if not watch.received:
            raise
        raise KeyboardInterrupt from None  # klog's SIGTERM handler has recorded "terminated"
    finally:
        watch.close()
        _watch = outer
