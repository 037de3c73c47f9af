"""One fake monotonic clock for the tests of anything that waits: it moves only when the test (or the
code under test, through `sleep`) says so, so no test sleeps past a timeout or depends on the load."""

from __future__ import annotations


class FakeClock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now
        self.sleeps: list[float] = []  # what the code under test slept, in order

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0, f"slept {seconds} s: a wait that has nothing to wait for"
        self.sleeps.append(seconds)
        self.now += seconds

    def advance(self, seconds: float) -> None:
        self.now += seconds
