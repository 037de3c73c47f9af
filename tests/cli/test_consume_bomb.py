"""A decompression bomb already in a store (written before klog serve bounded Produce, or copied in)
costs a reader no memory: `klog consume --json` refuses the batch at its bound (the topic's
max.message.bytes, or 100 times the batch's size: the rule `dirs import` applies) with one line
naming the batch's offset, and exits 1; `klog verify` reports it as damage under the same bound.
Measured as each process's peak RSS, not time."""

import os
import sys

import pytest

import klog
from tests.conftest import REPO
from tests.peak_rss import run_measured
from tests.serve_helpers import gzip_bomb_batch

RSS_KB_MAX = 200_000  # klog's own start-up is ~60 MB; the batch expanded costs 64 MiB, its JSON ~400 MB more


@pytest.mark.slow  # ~2.7 s: a 64 MiB gzip bomb made, a klog process started
def test_consume_json_refuses_a_bomb_in_the_store_in_bounded_memory(tmp_path) -> None:
    data_dir = str(tmp_path / "data")
    bomb = gzip_bomb_batch(2, 32 << 20)  # 64 MiB of records in ~64 KB: under the 256 MiB cap per batch
    with klog.open(data_dir) as store:
        store.create_topic("t")
        with store.producer() as p:
            p.send("t", b"before")
        part = store.partition("t", 0)
        with part.lock:
            part.open_for_write()
            part.append_batch(bomb)
            part.publish()
    code, rss_kb, error = _run(data_dir, "consume", "t", "--json")
    assert code == 1, error
    assert "offset 1" in error and "expands past" in error and "Traceback" not in error, error
    assert '"value": "before"' in error  # the record before the bomb came out first
    assert rss_kb < RSS_KB_MAX, rss_kb
    # verify reports the batch as the damage consume's message sends the user to it for
    code, rss_kb, said = _run(data_dir, "verify", "t")
    assert code == 1 and "DAMAGED" in said and "expands past" in said and "(offset 1)" in said, said
    assert rss_kb < RSS_KB_MAX, rss_kb


def _run(data_dir: str, *args: str) -> tuple[int, int, str]:
    """`klog ARGS`: its exit code, its peak RSS in KiB, and what it wrote (stderr, then stdout's tail)."""
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    got = run_measured([sys.executable, "-m", "klog", *args], env=env, timeout=120)
    return got.returncode, got.peak_rss_kib, got.said
