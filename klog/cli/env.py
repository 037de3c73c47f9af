"""The environment a command runs in, read once per command: which standard streams are terminals
(and stdout's width), NO_COLOR and TZ. Commands ask an Env (current_env()) instead of sys.stdout.isatty() and os.environ
themselves, and pass it down; tests substitute one (substitute_env) to see what a terminal gets.
Cheap to import: the hot consume path builds one."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import IO

from klog.store.plain import FrozenPlain


class Env(FrozenPlain):
    """Which standard streams are terminals, NO_COLOR and TZ (a plain record: the hot path skips dataclasses)."""

    __slots__ = _fields = ("stdin_tty", "stdout_tty", "stderr_tty", "no_color", "tz_set")

    def __init__(self, stdin_tty: bool = False, stdout_tty: bool = False, stderr_tty: bool = False,
                 no_color: bool = False, tz_set: bool = False) -> None:
        set_field = object.__setattr__
        set_field(self, "stdin_tty", stdin_tty)
        set_field(self, "stdout_tty", stdout_tty)
        set_field(self, "stderr_tty", stderr_tty)
        set_field(self, "no_color", no_color)  # NO_COLOR is set to something (https://no-color.org)
        set_field(self, "tz_set", tz_set)  # TZ is set: times in the local zone

    def color(self, no_color_flag: bool = False) -> bool:
        """Colour unless --no-color or NO_COLOR says not."""
        return not no_color_flag and not self.no_color

    def local_time(self, local_time_flag: bool = False) -> bool:
        """--local-time, or TZ set: times in the local zone; otherwise UTC (Z)."""
        return local_time_flag or self.tz_set

    def width(self) -> int | None:
        """The terminal's width in columns (COLUMNS, else the terminal's) when stdout is one; None in a
        pipe, where tables keep every row on one line for awk."""
        if not self.stdout_tty:
            return None
        import shutil  # here: the hot commands never draw a table

        return shutil.get_terminal_size().columns


_substitute: Env | None = None


def current_env() -> Env:
    """The process's Env as it is now (sys.stdout may have been replaced: a test's, CliRunner's)."""
    if _substitute is not None:
        return _substitute
    return Env(_is_tty(sys.stdin), _is_tty(sys.stdout), _is_tty(sys.stderr), bool(os.environ.get("NO_COLOR")),
               bool(os.environ.get("TZ")))


@contextlib.contextmanager
def substitute_env(env: Env) -> Iterator[Env]:
    """Run with `env` as every command's environment (tests: a terminal without a pty)."""
    global _substitute
    before, _substitute = _substitute, env
    try:
        yield env
    finally:
        _substitute = before


def _is_tty(stream: IO | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except ValueError:  # a closed stream is no terminal
        return False
