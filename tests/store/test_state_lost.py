"""Guarantee 8: lost state is an error (or is rebuilt safely, loudly), never an empty store."""

from __future__ import annotations

import os

import pytest

RECORDS = [b"r%d" % i for i in range(50)]


def _state_file(data_dir: str) -> str:
    return os.path.join(data_dir, "state", "t-0.state")


def _lose(path: str, how: str) -> None:
    if how == "missing":
        os.unlink(path)
    elif how == "empty":
        open(path, "wb").close()
    else:
        with open(path, "r+b") as f:
            f.seek(3)
            f.write(b"\xff")


@pytest.mark.parametrize("how", ["missing", "empty", "corrupt"])
def test_lost_state_file_makes_consume_fail_and_produce_rebuild_it(klog_proc, data_dir, how):
    assert klog_proc("produce", "t", input=b"\n".join(RECORDS) + b"\n").returncode == 0
    _lose(_state_file(data_dir), how)
    r = klog_proc("consume", "t")
    assert r.returncode == 1 and r.stdout == b""
    err = r.stderr.decode()
    assert err.count("\n") == 1 and "state file of t-0" in err and "verify --repair" in err, err
    if how == "missing":
        assert not os.path.exists(_state_file(data_dir)), "a read created the state file"
    # the next write rebuilds it from the log, and says so
    r = klog_proc("produce", "t", input=b"more\n")
    assert r.returncode == 0, r.stderr
    assert b"rebuilt from the log (high watermark 50" in r.stderr
    r = klog_proc("consume", "t")
    assert r.returncode == 0 and r.stdout.splitlines() == [*RECORDS, b"more"]


def test_a_partition_never_written_reads_empty_without_a_state_file(klog_proc, data_dir):
    assert klog_proc("topics", "create", "t").returncode == 0
    r = klog_proc("consume", "t")
    assert r.returncode == 0 and r.stdout == b""
    assert not os.path.exists(_state_file(data_dir))
