"""A topic's typed configs (Store.log_config): every key parsed, defaults as Kafka's, re-read after alter."""

from __future__ import annotations

import dataclasses

import pytest

import klog
from klog.store.config import CONFIG_KEYS, LogConfig


def test_log_config_has_a_typed_field_for_every_topic_config_with_its_default():
    defaults = LogConfig.from_configs({})
    assert len(dataclasses.fields(LogConfig)) == len(CONFIG_KEYS)
    assert defaults == LogConfig()  # the dataclass defaults are the table's defaults
    assert defaults.min_cleanable_dirty_ratio == 0.5 and defaults.unclean_leader_election_enable is False
    assert (defaults.compacted, defaults.deletes, defaults.log_append_time) == (False, True, False)


def test_log_config_follows_alter_and_a_bad_value_from_a_broker_takes_the_default(tmp_path):
    with klog.Store(str(tmp_path / "data")) as store:
        store.create_topic("t", partitions=1, configs={"retention.ms": "1000"})
        first = store.log_config("t")
        assert first.retention_ms == 1000 and store.log_config("t") is first  # parsed once
        store.alter_topic("t", set_configs={"cleanup.policy": "delete,compact",
                                            "unclean.leader.election.enable": "TRUE",
                                            "min.cleanable.dirty.ratio": "0.1"})
        after = store.log_config("t")
        assert after.cleanup_policy == "compact,delete" and after.compacted and after.deletes
        assert after.unclean_leader_election_enable is True and after.min_cleanable_dirty_ratio == 0.1
        assert after.retention_ms == 1000
    with pytest.raises(ValueError):
        LogConfig.from_configs({"compression.type": "uncompressed"})
    assert LogConfig.from_configs({"compression.type": "uncompressed"}, lenient=True).compression_type == "producer"
