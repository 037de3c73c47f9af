"""What `klog topics reassign` says when it has nothing to move."""

from __future__ import annotations

import os

import pytest

import klog


def _leader(data_dir: str) -> int:
    with klog.open(data_dir) as store:
        return store.topics.get("t").partitions[0].leader


@pytest.mark.slow
def test_a_reassign_with_nothing_left_to_move_says_so(cli, data_dir):
    """Run again once done (or after another process moved the replicas): it says nothing is in the
    source directory, rather than "Moved 0 replicas"; exit 0, as the replicas are where asked."""
    assert cli("dirs", "add", os.path.join(data_dir, "disk1")).exit_code == 0
    assert cli("topics", "create", "t").exit_code == 0
    assert cli("produce", "t", input=b"a\n").exit_code == 0
    source = _leader(data_dir)
    target = 1 - source
    r = cli("topics", "reassign", "t", "--from", str(source), "--to", str(target))
    assert (r.exit_code, r.stderr) == (0, f"Moved 1 replicas of t from log directory {source} to {target}\n")
    r = cli("topics", "reassign", "t", "--from", str(source), "--to", str(target))
    assert (r.exit_code, r.stderr) == (0, f"Moved nothing: no replica of t is in log directory {source}\n")
