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


def from_spark(exc: BaseException) -> KlogError:
    """The KlogError a Spark exception carries, else a KlogError with its first meaningful line."""
    text = str(exc)
    found = _KLOG_LINE.findall(text)
    if found:
        name, message = found[-1]
        cls = getattr(errors, name, KlogError)
        if not (isinstance(cls, type) and issubclass(cls, KlogError)):
            cls = KlogError
        error = cls.__new__(cls)
        Exception.__init__(error, message.strip())
        return error
    return errors.KlogError(f"Spark: {_first_line(text)}")


def _first_line(text: str) -> str:
    """The first line that is not a traceback, without Spark's [ERROR_CLASS] prefix and SQLSTATE suffix."""
    for line in text.splitlines():
        line = _SQLSTATE.sub("", _SPARK_CLASS.sub("", line.strip()))
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
