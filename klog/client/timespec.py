"""Time specs users type: ISO 8601 date-times, epoch milliseconds, or a span ago (90s, 15m, 2h, 7d,
optionally followed by "ago": "15m ago")."""

from __future__ import annotations

import re
import time

from klog.errors import UsageError

_SPAN = re.compile(r"(\d+)(ms|s|m|h|d|w)")
_AGO = re.compile(r"\s+ago$", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
# ISO 8601's durations as Java's Duration.parse reads them (Kafka's --by-duration PT1H): PnDTnHnMn.nS
_ISO_SPAN = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)(?:[.,](\d{1,9}))?S)?)?", re.IGNORECASE)
# ISO 8601's calendar units (P1Y, P1M, P2W): no fixed length, and Java's Duration.parse refuses them too
_ISO_CALENDAR = re.compile(r"P(?:\d+[YMWD])*\d+[YMW](?:\d+[YMWD])*(?:T.*)?", re.IGNORECASE)


def parse_span_ms(text: str) -> int:
    """A span: 90s, 15m, 2h, 7d, 1w, 500ms, or ISO 8601's PT1H, P1DT2H30M, PT0.5S."""
    m = _SPAN.fullmatch(text.strip())
    if m:
        return int(m.group(1)) * _UNIT_MS[m.group(2)]
    iso = _ISO_SPAN.fullmatch(text.strip())
    if iso and any(iso.groups()) and not text.strip().upper().endswith("T"):  # P alone, or PT with nothing: no
        days, hours, minutes, seconds = (int(g) if g else 0 for g in iso.groups()[:4])
        fraction_ms = int(((iso.group(5) or "") + "000")[:3])  # (finer than a millisecond is dropped)
        return ((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000 + fraction_ms
    if _ISO_CALENDAR.fullmatch(text.strip()):
        raise UsageError(f"invalid duration '{text}': years, months and weeks have no fixed length (Kafka's "
                         "Duration takes none either): give days, e.g. P30D or 30d")
    raise UsageError(f"invalid duration '{text}': use e.g. 90s, 15m, 2h, 7d (or ISO 8601's PT1H)")


def parse_time_ms(text: str, now_ms: int | None = None) -> int:
    """Epoch ms for an ISO date-time, an epoch-ms number, or a span before now ("15m", "15m ago")."""
    text = text.strip()
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if text.isascii() and text.isdigit():  # isdigit alone takes '²', which int() refuses
        return int(text)
    span = _AGO.sub("", text)
    if _SPAN.fullmatch(span) or (_ISO_SPAN.fullmatch(span) and span[:1] in "Pp" and len(span) > 1) \
            or _ISO_CALENDAR.fullmatch(span):
        return now_ms - parse_span_ms(span)
    try:
        import datetime as dt  # here: only an ISO time needs it

        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"invalid time '{text}': use an ISO date-time, epoch milliseconds, "
                         "or a span ago such as 15m or '15m ago'") from None
    if when.tzinfo is None:
        when = when.astimezone()  # a naive time is local time, as `date` shows it
    return int(when.timestamp() * 1000)


def parse_range(offset: str | None = None, since: str | None = None, until: str | None = None,
                tail: int | None = None, last: int | None = None, *, with_tail: bool = True,
                with_last: bool = False):  # noqa: ANN201
    """The one reading of the range options consume and replay share (-o, --since, --until, --tail,
    and consume's --last; Spark's export has no --tail): (StartSpec, until_ms or None). At most one start
    option may be given; `with_tail`/`with_last` name those in that error (the commands that have them)."""
    from klog.client.consumer import StartKind, StartSpec

    if offset is not None and offset.strip()[:2] in ("s@", "e@"):  # kcat's -o s@TS / -o e@TS: --since / --until
        spec, ts = offset.strip(), offset.strip()[2:]
        option = "--since" if spec[0] == "s" else "--until"
        if (since if spec[0] == "s" else until) is not None:
            raise UsageError(f"-o {spec} is kcat's spelling of {option} {ts}: give one of them")
        offset, since, until = (None, ts, until) if spec[0] == "s" else (None, since, ts)
    names = ["--offset", "--since"] + (["--tail"] if with_tail else []) + (["--last"] if with_last else [])
    if sum(x is not None for x in (offset, since, tail, last)) > 1:
        raise UsageError(f"use only one of {', '.join(names[:-1])} and {names[-1]}")
    if since is not None:
        start = StartSpec(StartKind.TIMESTAMP, parse_time_ms(since))
    elif tail is not None or last is not None:
        if tail is not None and tail < 0:
            raise UsageError("--tail needs a count of 0 or more")
        start = StartSpec(StartKind.TAIL, tail if tail is not None else last)
    else:
        start = StartSpec.parse("beginning" if offset is None else offset)
    return start, (parse_time_ms(until) if until else None)
