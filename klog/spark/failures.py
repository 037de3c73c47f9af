"""Spark errors as klog errors: one line for the user, never a JVM or worker stack trace.

A klog error raised inside Spark's Python workers (planning or reading) reaches the driver as a
Spark exception whose message holds the worker's traceback; its last line names the klog error.
"""

from __future__ import annotations

import re
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
    if causes:
        return errors.KlogError(f"Spark: {_first_line(_innermost(causes))}")
    return errors.KlogError(f"Spark: {_first_line(text)}")


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
