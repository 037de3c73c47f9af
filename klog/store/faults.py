"""Crash points: the one seam where tests make a process die mid-operation (Kafka's tests inject
faults the same way, by name). Production modules only call `point("name")`.

$KLOG_CRASH_AT = "step" or "step:N" SIGKILLs the process the Nth time (default the first) it
reaches `step`: crash tests use real kills, with no clean-up run.
"""

from __future__ import annotations

import os
import signal

CRASH_ENV = "KLOG_CRASH_AT"
CRASH_STEPS = ("cleaned-partial", "cleaned-written", "swap-partial", "swap-renamed", "index-replaced",
               "log-replaced", "before-checkpoint", "retention-log-start", "retention-renamed",
               "roll-flush-pending", "sealed-fsync", "first-append", "loop-append-published",
               "discard-written", "discard-renamed",
               "catch-up-copied", "move-recorded", "move-caught-up", "move-settled", "move-renamed")
_hits: dict[str, int] = {}
# os.environ's own mapping (encoded keys; os.environ[...] = ..., del and monkeypatch.setenv change
# it): a missing key costs a dict lookup there, against ~1 us for os.environ.get (a KeyError raised
# and caught), and klog serve passes a point on every append
_environ = getattr(os.environ, "_data", None)
_CRASH_KEY = os.environ.encodekey(CRASH_ENV) if _environ is not None else None  # type: ignore[attr-defined]


def point(step: str) -> None:
    """Die here if $KLOG_CRASH_AT names this step (and its count is reached)."""
    assert step in CRASH_STEPS, step
    if _environ is not None and _CRASH_KEY not in _environ:
        return
    wanted = os.environ.get(CRASH_ENV)
    if not wanted:
        return
    name, _, nth = wanted.partition(":")
    if name != step:
        return
    _hits[step] = _hits.get(step, 0) + 1
    if _hits[step] >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
