"""ISO 8601 durations (Kafka's --by-duration PT1H, Java's Duration.parse) wherever klog takes a span."""

from __future__ import annotations

import pytest

from klog.client.timespec import parse_span_ms, parse_time_ms
from klog.errors import UsageError


@pytest.mark.parametrize(("text", "ms"), [("PT1H", 3_600_000), ("pt15m", 900_000), ("P1D", 86_400_000),
                                          ("P1DT2H30M", 95_400_000), ("PT0.5S", 500), ("PT1,25S", 1250),
                                          ("PT0.0001S", 0), ("90s", 90_000), ("7d", 604_800_000)])
def test_spans(text, ms):
    assert parse_span_ms(text) == ms


@pytest.mark.parametrize("text", ["P", "PT", "P1DT", "P1Y", "P1W", "-PT1H", "PT1H2", "1h30m"])
def test_what_is_not_a_span(text):
    with pytest.raises(UsageError, match="invalid duration"):
        parse_span_ms(text)


def test_a_time_may_be_an_iso_span_ago():
    assert parse_time_ms("PT1M", now_ms=100_000) == parse_time_ms("1m ago", now_ms=100_000) == 40_000
