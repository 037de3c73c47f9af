"""The terminal log view of `klog consume`: one line per record, drawn without rich.

Lines are built as strings with precomputed ANSI styles (rich's per-record Text objects drew about
2.5 k records/s; see benchmarks/cases/viewer.py) and written in bursts: whatever the consumer hands
over before it would wait is drawn in one write, so a burst costs one terminal write per few
thousand records, not one per record. Colours are the ones rich used (dim time, cyan position,
bold yellow key, rich's JSON theme); NO_COLOR or --no-color draws plain text. Record bytes are
escaped (terminal_safe): data never drives the terminal.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from klog.cli.output import terminal_safe
from klog.client.record_writer import WRITE_CHUNK_BYTES
from klog.client.records import Record

if TYPE_CHECKING:
    from klog.client.consumer import ConsumerBase

RESET = "\x1b[0m"
STYLES = {
    "time": "\x1b[2m", "where": "\x1b[36m", "key": "\x1b[1;33m", "tombstone": "\x1b[3;31m",
    "headers": "\x1b[35m", "hint": "\x1b[2m",
    # rich's JSON theme (JSONHighlighter): braces bold, keys bold blue, strings green, numbers bold cyan
    "brace": "\x1b[1m", "jkey": "\x1b[1;34m", "str": "\x1b[32m", "number": "\x1b[1;36m",
    "true": "\x1b[3;92m", "false": "\x1b[3;91m", "null": "\x1b[3;35m",
}
FLUSH_LINES = 2048  # a burst is drawn in writes of this many lines at most
SKIP_LAG = 250_000  # -f on a terminal: this many records behind (~5 s of drawing), skip ahead...
KEEP_RECORDS = 10_000  # ...to the newest this many (split over the partitions)
HINT_AFTER_S = 1.0  # -f on a terminal: show "waiting for records…" after this long without any
HINT = "waiting for records… (Ctrl-C to stop)"
_JSON_TOKEN = re.compile(
    r'(?P<jkey>"(?:[^"\\]|\\.)*")(?=\s*:)|(?P<str>"(?:[^"\\]|\\.)*")|(?P<brace>[{}\[\]])'
    r"|(?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)|\b(?P<true>true)\b|\b(?P<false>false)\b|\b(?P<null>null)\b")


def write_stdout(data: bytes) -> None:
    """Write all of `data` to stdout (fd 1), in bounded chunks, each write checked."""
    import sys

    sys.stdout.flush()
    view = memoryview(data)
    while view:
        written = os.write(1, view[:WRITE_CHUNK_BYTES])
        view = view[written:]


class TerminalView:
    def __init__(self, show_topic: bool, color: bool = True, local_time: bool = False,
                 skip_lag: int = SKIP_LAG) -> None:
        self.show_topic = show_topic
        self.skip_lag = skip_lag
        self.color = color
        self.local_time = local_time
        self._second = -1
        self._second_text = ""
        s = STYLES if color else dict.fromkeys(STYLES, "")
        reset = RESET if color else ""
        self._time_on, self._where_on, self._key_on = s["time"], s["where"], s["key"]
        self._headers_on, self._reset = s["headers"], reset
        self._tombstone = f"{s['tombstone']}(tombstone){reset}"
        # the style of each group of _JSON_TOKEN, by group number (m.lastindex)
        self._json_on = ("",) + tuple(s[name] for name in sorted(_JSON_TOKEN.groupindex,
                                                                 key=_JSON_TOKEN.groupindex.get))

    # -- one record ------------------------------------------------------------------------------
    def timestamp(self, ts_ms: int) -> str:
        """ISO 8601 with milliseconds; the text up to the second is reused within a second."""
        second, ms = divmod(ts_ms, 1000)
        if second != self._second:
            try:
                if self.local_time:
                    moment = dt.datetime.fromtimestamp(second).astimezone()
                    zone = moment.strftime("%z")
                    zone = "Z" if zone == "+0000" else f"{zone[:3]}:{zone[3:]}"
                else:
                    moment, zone = dt.datetime.fromtimestamp(second, tz=dt.UTC), "Z"
                self._second_text = moment.strftime("%Y-%m-%dT%H:%M:%S") + ".%03d" + zone
            except (OverflowError, OSError, ValueError):  # -1 (no timestamp) or beyond datetime's range
                return str(ts_ms)
            self._second = second
        return self._second_text % ms

    def line(self, r: Record) -> str:
        where = f"{r.topic}/{r.partition}@{r.offset}" if self.show_topic else f"{r.partition}@{r.offset}"
        reset = self._reset
        parts = [self._time_on, self.timestamp(r.timestamp), reset, "  ", self._where_on, where, reset]
        if r.key is not None:
            parts += ["  ", self._key_on, terminal_safe(r.key), reset]
        parts.append("  ")
        if r.value is None:
            parts.append(self._tombstone)
        else:
            text = terminal_safe(r.value)
            parts.append(self._json(text) if self.color and text[:1] in "{[" and _is_json(r.value) else text)
        if r.headers:
            shown = " ".join(f"{terminal_safe(k.encode('utf-8', 'surrogateescape'))}={terminal_safe(v or b'')}"
                             for k, v in r.headers)
            parts += ["  ", self._headers_on, shown, reset]
        parts.append("\n")
        return "".join(parts)

    def _json(self, text: str) -> str:
        return _JSON_TOKEN.sub(self._json_token, text)

    def _json_token(self, m: re.Match) -> str:  # called per token: index lookups only
        return self._json_on[m.lastindex] + m[0] + self._reset

    # -- drawing -----------------------------------------------------------------------------------
    def _keep_up(self, consumer: ConsumerBase, write: Callable[[bytes], object]) -> None:
        """-f on a terminal that the log outruns: when more than SKIP_LAG records written since the view
        started wait, jump to the newest KEEP_RECORDS and say how many were skipped (a view must not fall
        minutes behind). What was there when it started (-o beginning) is drawn whole."""
        waiting = [(c, c.part.high_watermark(), self._start_hw.get((c.topic, c.partition), 0))
                   for c in consumer.cursors]
        if sum(max(0, hw - max(c.offset, start)) for c, hw, start in waiting) <= self.skip_lag:
            return
        keep = max(1, KEEP_RECORDS // len(waiting))
        skipped = 0
        for c, hw, start in waiting:
            target = max(hw - keep, start)
            if target > c.offset:
                skipped += target - c.offset
                consumer.seek(c.topic, c.partition, target)
        if skipped:
            write(_skip_note(self.color, skipped))

    def draw(self, records: Iterable[Record], write: Callable[[bytes], object]) -> None:
        """Draw every record; `write` gets whole lines in bursts (a consumer's on_wait flushes)."""
        buf: list[str] = []
        line = self.line
        self._hint_shown = False

        def flush() -> None:
            if buf:
                text = "".join(buf)
                buf.clear()
                if self._hint_shown:
                    text = "\r\x1b[K" + text  # the hint line is overwritten by the records
                    self._hint_shown = False
                write(text.encode("utf-8", "replace"))

        def on_wait(waited_s: float) -> None:
            flush()
            if waited_s >= HINT_AFTER_S and not self._hint_shown:
                hint = f"{STYLES['hint']}{HINT}{RESET}" if self.color else HINT
                write(hint.encode())
                self._hint_shown = True

        if hasattr(records, "on_wait"):
            records.on_wait = on_wait  # type: ignore[attr-defined]
        following = getattr(records, "follow", False) and hasattr(records, "cursors")
        if following:
            self._start_hw = {(c.topic, c.partition): c.part.high_watermark() for c in records.cursors}
        try:
            for r in records:
                buf.append(line(r))
                if len(buf) >= FLUSH_LINES:
                    flush()
                    if following:
                        self._keep_up(records, write)
        finally:
            flush()
            if self._hint_shown:
                write(b"\r\x1b[K")


def _skip_note(self_color: bool, skipped: int) -> bytes:
    note = (f"… {skipped:,} records skipped to keep up with the log (a pipe or --json gets every record) …")
    return (f"{STYLES['hint']}{note}{RESET}\n" if self_color else note + "\n").encode()


def _is_json(data: bytes) -> bool:
    import json

    try:
        json.loads(data)
        return True
    except ValueError:
        return False
