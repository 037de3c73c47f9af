"""A partition folder's Kafka checkpoint files (leader-epoch-checkpoint, partition.metadata) are read
at a writer's close only until the replica state file records what they hold; then only a change
of what they must say (a new leader epoch, another topic id) or of the folder (a file rewritten
behind klog's back) makes the close look at them, and rewrite them."""

from __future__ import annotations

import os
import time

import klog
from klog.broker import kafka_checkpoints
from klog.store import checkpoints, log
from klog.store.plain import replace
from klog.store.state import ReplicaState, ReplicaTrust
from tests.kafka_files import read_checkpoint


def _produce(data_dir: str, value: bytes) -> None:
    with klog.open(data_dir) as store, store.producer() as p:
        p.send("t", value, partition=0)


def _trust(folder: str) -> ReplicaTrust | None:
    state = ReplicaState(os.path.join(folder, ReplicaState.FILE_NAME))
    try:
        snap = state.read()
    finally:
        state.close()
    return snap.trust if snap is not None else None


def _recorded(data_dir: str, monkeypatch) -> tuple[str, list[str]]:
    """A topic whose folder's checkpoint digest is recorded; the paths the closes look at, from now on."""
    with klog.open(data_dir) as store:
        store.create_topic("t", 1)
    folder = os.path.join(data_dir, "logs", "t-0")
    _produce(data_dir, b"a")  # creates the files
    time.sleep(log.FOLDER_SETTLED_NS / 1e9 + 0.02)  # (until the folder's last change is settled)
    _produce(data_dir, b"b")  # lists the folder, reads the files, records both
    trust = _trust(folder)
    assert trust is not None and trust.folder_ino and trust.flags & ReplicaTrust.CHECKPOINTS_KNOWN
    looked: list[str] = []
    real = kafka_checkpoints._write_if_changed
    monkeypatch.setattr(kafka_checkpoints, "_write_if_changed",
                        lambda path, *a, **k: looked.append(path) or real(path, *a, **k))
    return folder, looked


def test_recorded_checkpoint_files_are_not_read_again(data_dir, monkeypatch):
    folder, looked = _recorded(data_dir, monkeypatch)
    _produce(data_dir, b"c")
    assert not [p for p in looked if p.startswith(folder + os.sep)]
    assert read_checkpoint(os.path.join(folder, "leader-epoch-checkpoint"), 2) == [["0", "0"]]


def test_a_new_leader_epoch_is_written_to_a_recorded_folder(data_dir, monkeypatch):
    folder, looked = _recorded(data_dir, monkeypatch)
    with klog.open(data_dir) as store:
        meta = store.topics.get("t").partitions[0]
        store.topics.update_partition("t", 0, replace(meta, leader_epoch=meta.leader_epoch + 1,
                                                      epochs=[*meta.epochs, [meta.leader_epoch + 1, 2]]))
    _produce(data_dir, b"c")
    assert read_checkpoint(os.path.join(folder, "leader-epoch-checkpoint"), 2) == [["0", "0"], ["1", "2"]]


def test_a_checkpoint_file_rewritten_behind_the_record_is_put_right(data_dir, monkeypatch):
    folder, looked = _recorded(data_dir, monkeypatch)
    path = os.path.join(folder, "leader-epoch-checkpoint")
    checkpoints.write_atomically(path, checkpoints.checkpoint_text(["7 0"]))  # a rename: the folder changes
    _produce(data_dir, b"c")
    assert path in looked
    assert read_checkpoint(path, 2) == [["0", "0"]]
