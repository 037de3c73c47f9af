"""TopicInfo.offsets: the offsets between log start and high watermark, summed; `records` is its
deprecated old name (it never counted records)."""

import warnings

import pytest

import klog


def test_offsets_counts_offsets_and_records_is_a_deprecated_alias(tmp_path):
    with klog.open(str(tmp_path / "d")) as store:
        store.create_topic("t", partitions=2)
        with store.producer() as producer:
            for i in range(5):
                producer.send("t", b"v%d" % i, partition=i % 2)
        store.delete_records("t", before_offset=1)
        info = store.describe_topic("t")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert info.offsets == 3  # partition 0: offsets 1..2, partition 1: offset 1
        with pytest.warns(DeprecationWarning, match="TopicInfo.offsets"):
            assert info.records == 3
