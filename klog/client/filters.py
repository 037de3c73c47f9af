"""Which records to keep: consume's --grep, --grep-key and --grep-header as a library object.

    store.consumer("orders", record_filter=RecordFilter(value=r"refund", key=r"^eu-"))

Patterns are regular expressions searched in the raw bytes (a str pattern is UTF-8 encoded); a
record passes when every given pattern matches: the value, the key (a null key never matches), and
for `header` some header rendered as `name=value`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from klog.client.records import Record
from klog.errors import UsageError

Pattern = str | bytes | re.Pattern[bytes]


class RecordFilter:
    """A Record -> bool accepting records that every given pattern matches."""

    def __init__(self, value: Pattern | None = None, key: Pattern | None = None,
                 header: Pattern | None = None) -> None:
        tests: list[Callable[[Record], bool]] = []
        # the option names in errors: the CLI passes its flags' texts through unchanged
        for flag, pattern, field in (("--grep", value, "value"), ("--grep-key", key, "key"),
                                     ("--grep-header", header, "headers")):
            if not pattern:
                continue
            rx = _compile(flag, pattern)
            if field == "headers":
                tests.append(lambda r, rx=rx: any(rx.search(k.encode("utf-8", "surrogateescape") + b"=" + (v or b""))
                                                  for k, v in r.headers))
            else:
                tests.append(lambda r, rx=rx, field=field: (getattr(r, field) is not None
                                                            and rx.search(getattr(r, field)) is not None))
        self.empty = not tests
        if len(tests) == 1:
            self._test = tests[0]
        else:
            self._test = lambda r: all(t(r) for t in tests)

    def __call__(self, record: Record) -> bool:
        return self._test(record)

    @classmethod
    def of(cls, value: Pattern | None = None, key: Pattern | None = None,
           header: Pattern | None = None) -> RecordFilter | None:
        """A filter, or None when no pattern is given (a consumer then checks nothing per record)."""
        made = cls(value, key, header)
        return None if made.empty else made


def _compile(flag: str, pattern: Pattern) -> re.Pattern[bytes]:
    if isinstance(pattern, re.Pattern):
        return pattern
    text = pattern.encode() if isinstance(pattern, str) else pattern
    try:
        return re.compile(text)
    except re.error as e:
        shown = pattern if isinstance(pattern, str) else pattern.decode(errors="replace")
        raise UsageError(f"invalid {flag} '{shown}': {e}") from None
