"""The regular expressions of a JSON schema's patternProperties, matched against property names while the
registry compares two schemas (a property covered by a partially open content model), in a child process
with a deadline. Both the pattern and the name come from the request, and Python's `re` backtracks: `^(a+)+$`
against 28 a's and a '!' takes 14 s, longer ones minutes, holding the GIL (so every other request waits).
A comparison whose matching outlasts its deadline refuses the request (42201) instead of stalling the
registry; one child per comparison that needs it, started at its first match (about 20 ms)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

from klog.protocol.json_schema import SchemaProblem

DEADLINE_S = 2.0  # all of one comparison's matching; a real schema's patterns match in microseconds
MEMORY_LIMIT = 512 << 20  # the child's address space: a pattern cannot make it take the machine's memory

# one JSON line [pattern, name] in, "1" (found), "0" (not found or no Python regex) out
_CHILD = f"""
import json, re, sys
try:
    import resource
    resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_LIMIT}, {MEMORY_LIMIT}))
except (ImportError, ValueError, OSError):
    pass
for line in sys.stdin:
    pattern, name = json.loads(line)
    try:
        found = re.search(pattern, name) is not None
    except (re.error, RecursionError, OverflowError, MemoryError, TypeError):
        found = False
    sys.stdout.write("1\\n" if found else "0\\n")
    sys.stdout.flush()
"""


class PatternMatcher:
    """re.search(pattern, name) for one comparison, answers cached, every match within one deadline."""

    def __init__(self, deadline_s: float = DEADLINE_S) -> None:
        self.deadline_s = deadline_s
        self._deadline = 0.0
        self._child: subprocess.Popen[bytes] | None = None
        self._answers: dict[tuple[str, str], bool] = {}

    def search(self, pattern: str, name: str) -> bool:
        key = (pattern, name)
        if key not in self._answers:
            self._answers[key] = self._ask(pattern, name)
        return self._answers[key]

    def _ask(self, pattern: str, name: str) -> bool:
        try:
            child = self._started()
            assert child.stdin is not None and child.stdout is not None
            child.stdin.write(json.dumps([pattern, name]).encode() + b"\n")
            child.stdin.flush()
            answer = b""
            waiting = select.poll()  # not select(): a busy server's descriptors pass 1024
            waiting.register(child.stdout, select.POLLIN)
            while not answer.endswith(b"\n"):
                remaining = self._deadline - time.monotonic()
                if remaining <= 0 or not waiting.poll(remaining * 1000):
                    raise SchemaProblem(f"patternProperties pattern {pattern[:80]!r} takes too long to match "
                                        f"property {name[:80]!r} (more than {self.deadline_s:g} s in all)")
                chunk = os.read(child.stdout.fileno(), 16)
                if not chunk:
                    raise SchemaProblem(f"patternProperties pattern {pattern[:80]!r} could not be matched")
                answer += chunk
        except SchemaProblem:
            self.close()
            raise
        except OSError as e:  # no child (no descriptors, memory) or gone (its memory limit): no verdict
            self.close()
            raise SchemaProblem(f"patternProperties pattern {pattern[:80]!r} could not be matched: {e}") from None
        return answer == b"1\n"

    def _started(self) -> subprocess.Popen[bytes]:
        if self._child is None:
            self._deadline = time.monotonic() + self.deadline_s
            self._child = subprocess.Popen([sys.executable, "-I", "-S", "-c", _CHILD], stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        return self._child

    def close(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.kill()
            child.wait()
            for pipe in (child.stdin, child.stdout):
                if pipe is not None:
                    pipe.close()
