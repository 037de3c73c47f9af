"""Topic configs keep Kafka's ranges: INT-typed ones (segment.bytes, segment.index.bytes,
index.interval.bytes, min.insync.replicas, max.message.bytes) stop at 2**31 - 1 and LONG ones at
2**63 - 1, as Kafka's ConfigDef; klog took `segment.bytes=2**62` (found by the CLI campaign)."""

from __future__ import annotations

import pytest

from klog.errors import InvalidConfigError
from klog.store.config import validate_configs

INT_KEYS = ("segment.bytes", "segment.index.bytes", "index.interval.bytes", "min.insync.replicas",
            "max.message.bytes")


@pytest.mark.parametrize("key", INT_KEYS)
def test_int_configs_stop_at_int_max(key):
    assert validate_configs({key: str(2**31 - 1)})[key] == str(2**31 - 1)
    with pytest.raises(InvalidConfigError, match="at most 2147483647"):
        validate_configs({key: str(2**31)})


@pytest.mark.parametrize("key", ("retention.ms", "segment.ms", "flush.messages", "max.compaction.lag.ms"))
def test_long_configs_stop_at_long_max(key):
    assert validate_configs({key: str(2**63 - 1)})[key] == str(2**63 - 1)
    with pytest.raises(InvalidConfigError, match="at most"):
        validate_configs({key: str(2**63)})


def test_the_cli_refuses_segment_bytes_past_int_max(cli):
    r = cli("topics", "create", "t", "-c", f"segment.bytes={2**62}")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "segment.bytes" in r.stderr, r.stderr


def test_a_stored_value_past_the_range_still_opens():
    """The bound is checked where a value is set: a store that took a larger one still opens."""
    from klog.store.config import LogConfig

    assert LogConfig.from_configs({"segment.bytes": str(2**40)}).segment_bytes == 2**40
