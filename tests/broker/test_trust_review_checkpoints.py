"""Review of the checkpoint digest a trusted open adopts (issue 29): a close skips reading the
folder's Kafka checkpoint files while its digest says they hold what they must; a file rewritten
behind the writer *during* its session (after its open checked the folder, before its close) is
what that skip must not miss."""

from __future__ import annotations

import os

import klog
from klog.store import checkpoints
from tests.broker.test_checkpoint_digest import _recorded
from tests.kafka_files import read_checkpoint


def test_a_checkpoint_file_rewritten_during_a_trusted_writers_session_is_put_right_at_its_close(data_dir,
                                                                                                monkeypatch):
    """Another process (a Kafka tool, an older klog's walk of every partition from a state file
    that lags) renames a leader-epoch-checkpoint over the folder's while a producer that trusted
    the record is open: the producer's close must leave the file saying what klog's metadata says,
    as it did before the digest (it read the file at every close)."""
    folder, _ = _recorded(data_dir, monkeypatch)
    path = os.path.join(folder, "leader-epoch-checkpoint")
    with klog.open(data_dir) as store, store.producer() as p:
        p.send("t", b"c", partition=0)
        p.flush()
        checkpoints.write_atomically(path, checkpoints.checkpoint_text(["7 0"]))  # (a rename: the folder changes)
    assert read_checkpoint(path, 2) == [["0", "0"]]
