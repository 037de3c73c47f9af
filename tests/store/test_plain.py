"""klog.store.plain's record classes behave as the dataclasses they replace: repr, ==, hash,
frozen fields, replace, pickle and copy."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from klog.client.records import Record, RecordMetadata
from klog.meta.topics import PartitionMeta
from klog.store.config import LogConfig
from klog.store.plain import replace


def test_repr_and_equality_are_a_dataclasses() -> None:
    record = Record("t", 0, 5, 1000, 0, b"k", None, [("h", b"1")])
    assert repr(record) == ("Record(topic='t', partition=0, offset=5, timestamp=1000, timestamp_type=0, key=b'k', "
                            "value=None, headers=[('h', b'1')])")
    assert record == Record("t", 0, 5, 1000, 0, b"k", None, [("h", b"1")])
    assert record != Record("t", 0, 6, 1000, 0, b"k", None, [("h", b"1")])
    assert record != ("t", 0, 5, 1000, 0, b"k", None, [("h", b"1")])
    with pytest.raises(TypeError):
        hash(record)  # mutable: unhashable, as an eq dataclass


def test_a_frozen_record_is_hashable_and_refuses_assignment() -> None:
    meta = RecordMetadata("t", 1, 2, 3)
    assert hash(meta) == hash(RecordMetadata("t", 1, 2, 3)) and len({meta, RecordMetadata("t", 1, 2, 3)}) == 1
    with pytest.raises(AttributeError):
        meta.offset = 9  # type: ignore[misc]
    assert LogConfig(retention_ms=5) == LogConfig.from_configs({"retention.ms": "5"})
    with pytest.raises(TypeError):
        LogConfig(retention=5)


def test_replace_pickle_and_copy() -> None:
    pm = PartitionMeta([0, 1], 0, [0, 1])
    assert replace(pm, isr=[0]) == PartitionMeta([0, 1], 0, [0], 0, [[0, 0]]) and pm.isr == [0, 1]
    with pytest.raises(TypeError):
        replace(pm, bogus=1)
    for value in (pm, RecordMetadata("t", 1, 2, 3), LogConfig(segment_bytes=100)):
        for clone in (pickle.loads(pickle.dumps(value)), copy.copy(value), copy.deepcopy(value)):
            assert clone == value and type(clone) is type(value)


def test_the_dataclasses_functions_still_take_them() -> None:
    pm = PartitionMeta([0, 1], 0, [0, 1])
    assert dataclasses.is_dataclass(pm) and [f.name for f in dataclasses.fields(PartitionMeta)] == list(pm._fields)
    assert dataclasses.replace(pm, leader_epoch=3) == replace(pm, leader_epoch=3)
    assert dataclasses.asdict(pm) == {"replicas": [0, 1], "leader": 0, "isr": [0, 1], "leader_epoch": 0,
                                      "epochs": [[0, 0]], "move": None}
    meta = RecordMetadata("t", 1, 2, 3)
    assert dataclasses.replace(meta, offset=7) == RecordMetadata("t", 1, 7, 3)
    assert dataclasses.astuple(LogConfig())[0] == LogConfig().segment_bytes
