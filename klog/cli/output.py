"""Rendering records: the one choice between the terminal view, JSON, a --format string and raw
values (record_output, made once per command from its Env), kcat-style --format strings, and
escaping for a terminal (the JSON envelope is klog.client.envelope; writing records out is
klog.client.record_writer)."""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING

# the JSON envelope lives in the library (klog.client.envelope); its names stay importable here
from klog.client.envelope import bytes_to_json, json_to_bytes, record_json_line, record_to_json  # noqa: F401
from klog.client.record_writer import Line, value_line
from klog.client.records import Record
from klog.errors import UsageError
from klog.store.plain import FrozenPlain

if TYPE_CHECKING:
    from klog.cli.env import Env
    from klog.cli.view import TerminalView

FORMAT_HELP = ("Format tokens (kcat style): %t topic, %p partition, %o offset, %k key, %s value, %K key size, "
               "%S value size, %h headers (k=v,k=v), %T timestamp (epoch ms), %I timestamp (ISO 8601 UTC), "
               "%y timestamp type, \\n newline, \\t tab, \\r carriage return, \\0 NUL, \\xNN any byte, \\\\ backslash, "
               "%% percent.")


def iso(ts_ms: int) -> str:
    import datetime as dt  # here: only %I needs it

    return dt.datetime.fromtimestamp(ts_ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


# -- the one output choice ---------------------------------------------------------------------
class OutputFormat(StrEnum):
    """How records leave a command."""

    VIEW = "view"  # the readable log (klog.cli.view): stdout is a terminal, no --json or --format
    JSON = "json"  # the JSON envelope, one line a record (--json)
    FORMAT = "format"  # a kcat-style --format string
    RAW = "raw"  # each value alone on a line: a pipe or a file


class RecordOutput(FrozenPlain):
    """The output a command chose: its format, and `line` where a record is rendered here (None: the
    library's own fast paths write values, or JSON lines a run at a time)."""

    __slots__ = _fields = ("format", "line")

    def __init__(self, format: OutputFormat, line: Line | None = None) -> None:  # noqa: A002 - the field's name
        object.__setattr__(self, "format", format)
        object.__setattr__(self, "line", line)

    @property
    def as_json(self) -> bool:
        return self.format is OutputFormat.JSON

    def render(self) -> Line:
        """A record as bytes, whatever the format but VIEW (whose lines TerminalView draws)."""
        assert self.format is not OutputFormat.VIEW, "the terminal view draws its own lines"
        return self.line or (record_json_line if self.as_json else value_line)


def named_format(fmt: str | None, as_json: bool) -> tuple[str | None, bool]:
    """(--format, --json) with rpk's named format `--format json` as --json (klog's envelope)."""
    if fmt is not None and fmt.strip().lower() == "json":
        return None, True
    return fmt, as_json


def record_output(env: Env, fmt: str | None = None, as_json: bool = False) -> RecordOutput:
    """The one choice of how records are written: --format, else --json, else the terminal view on a
    terminal and raw values elsewhere. On a terminal, record data is escaped (it must not drive it)."""
    if fmt is not None and as_json:
        raise UsageError("use --format or --json, not both")
    if fmt is not None:
        return RecordOutput(OutputFormat.FORMAT, compile_format(fmt, escape=env.stdout_tty))
    if as_json:
        if env.stdout_tty:  # JSON escapes C0 controls itself; DEL and C1 controls too, here
            return RecordOutput(OutputFormat.JSON, lambda r: json_for_terminal(record_to_json(r)).encode() + b"\n")
        return RecordOutput(OutputFormat.JSON)
    return RecordOutput(OutputFormat.VIEW if env.stdout_tty else OutputFormat.RAW)


def terminal_view(env: Env, show_topic: bool, no_color: bool = False, local_time: bool = False) -> TerminalView:
    """The readable log view for this environment (--no-color, NO_COLOR; --local-time, TZ)."""
    from klog.cli.view import TerminalView

    return TerminalView(show_topic, env.color(no_color), env.local_time(local_time))


# -- --format ----------------------------------------------------------------------------------
_TOKEN = re.compile(r"%[tpokKsShTIy%]|\\(?:[ntr0\\]|x[0-9a-fA-F]{2})")


def compile_format(fmt: str, escape: bool = False) -> Callable[[Record], bytes]:
    """Turn a kcat-style format into a function Record -> bytes (parsed once, not per record).
    `escape` (a terminal): control characters of keys, values, headers and topics shown escaped."""
    parts: list[Callable[[Record], bytes] | bytes] = []
    pos = 0
    for m in _TOKEN.finditer(fmt):
        if m.start() > pos:
            parts.append(fmt[pos:m.start()].encode())
        fn = _token_fn(m.group())
        if escape and m.group() in ("%k", "%s", "%h", "%t"):
            fn = (lambda f: lambda r: terminal_safe(f(r)).encode())(fn)
        parts.append(fn)
        pos = m.end()
    if "%" in _TOKEN.sub("", fmt):
        bad = re.search(r"%.?", _TOKEN.sub("", fmt))
        raise UsageError(f"unknown --format token '{bad.group() if bad else '%'}'")
    if pos < len(fmt):
        parts.append(fmt[pos:].encode())
    if not any(t.startswith("%") and t != "%%" for t in _TOKEN.findall(fmt)):  # a word: rpk's named formats
        raise UsageError(f"--format '{fmt}' has no %-token, so every record would print the same text: use "
                         "tokens %t %p %o %k %s %K %S %h %T %I %y (e.g. '%k %s\\n'), or --format json (--json)")

    def render(r: Record) -> bytes:
        return b"".join(p if isinstance(p, bytes) else p(r) for p in parts)

    return render


def _token_fn(token: str) -> Callable[[Record], bytes] | bytes:
    literal = {"\\n": b"\n", "\\t": b"\t", "\\r": b"\r", "\\0": b"\0", "\\\\": b"\\", "%%": b"%"}
    if token in literal:
        return literal[token]
    if token.startswith("\\x"):
        return bytes([int(token[2:], 16)])
    return {
        "%t": lambda r: r.topic.encode(),
        "%p": lambda r: str(r.partition).encode(),
        "%o": lambda r: str(r.offset).encode(),
        "%k": lambda r: r.key or b"",
        "%K": lambda r: str(-1 if r.key is None else len(r.key)).encode(),
        "%s": lambda r: r.value or b"",
        "%S": lambda r: str(-1 if r.value is None else len(r.value)).encode(),
        "%h": lambda r: b",".join(k.encode("utf-8", "surrogateescape") + b"=" + (v or b"") for k, v in r.headers),
        "%T": lambda r: str(r.timestamp).encode(),
        "%I": lambda r: iso(r.timestamp).encode(),
        "%y": lambda r: r.timestamp_type_name.encode(),
    }[token]


# -- terminal log view -------------------------------------------------------------------------
# C0 controls but tab, DEL and C1 controls: record data must not drive the terminal (set its
# title, clear the screen, move the cursor); they are shown escaped, \n and \r included.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_NAMED = {"\n": "\\n", "\r": "\\r"}


_JSON_UNSAFE = re.compile(r"[\x7f-\x9f]")


def json_for_terminal(text: str) -> str:
    """JSON text with DEL and C1 controls as \\u escapes (json.dumps escapes only C0): same JSON."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def terminal_safe(data: bytes) -> str:
    """Decode for display (invalid UTF-8 as U+FFFD) with control characters escaped (\\x07)."""
    text = data.decode("utf-8", errors="replace")
    return _CONTROL.sub(lambda m: _NAMED.get(m.group(), f"\\x{ord(m.group()):02x}"), text)
