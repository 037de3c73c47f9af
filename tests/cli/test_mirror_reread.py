"""`klog mirror` re-read whole (the read_committed default, its checkpoints, stops and kills).

What a user sees: after a mirror stopped at any point (Ctrl-C and SIGTERM arrive as
KeyboardInterrupt, wherever the copy loop is) and run again, DEST read at read_committed holds every
source record, each once with --exactly-once.
"""

from __future__ import annotations

import pytest

import klog
from klog.client import mirror as mirror_module
from klog.client.mirror import Mirror


def _dest_values(path: str) -> list[bytes]:
    with klog.open(path, create=False) as store:
        return [r.value for r in store.consumer("t", isolation_level="read_committed", merge=False)]


def _source(tmp_path, count: int) -> tuple[str, str, list[bytes]]:  # noqa: ANN001
    """(src, dst, values): a store src whose one-partition topic t holds `count` values."""
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    values = [str(i).encode() for i in range(count)]
    with klog.open(src) as store:
        store.create_topic("t", partitions=1)
        with store.producer() as producer:
            for v in values:
                producer.send("t", v)
    return src, dst, values


@pytest.mark.parametrize("exactly_once", [False, True])
def test_a_stop_in_the_middle_of_sending_a_poll_loses_none_of_its_records(tmp_path, monkeypatch, exactly_once):
    """The consumer's positions pass a poll's records before they are sent; a stop while sending them
    checkpointed those positions: the rerun skipped the records not yet sent (lost for good)."""
    src, dst, values = _source(tmp_path, 1000)
    send = mirror_module._send_local

    def stopped_halfway(producer, topic, partition, records):  # noqa: ANN001 - a signal arrives mid-send
        send(producer, topic, partition, records[:len(records) // 2])
        raise KeyboardInterrupt

    monkeypatch.setattr(mirror_module, "_send_local", stopped_halfway)
    with klog.open(src, create=False) as store, klog.open(dst) as dest:
        with pytest.raises(KeyboardInterrupt):
            Mirror(store, dest, ["t"], mirror_id="m", exactly_once=exactly_once).run()
    monkeypatch.setattr(mirror_module, "_send_local", send)
    with klog.open(src, create=False) as store, klog.open(dst) as dest:
        Mirror(store, dest, ["t"], mirror_id="m", exactly_once=exactly_once).run()
    copied = _dest_values(dst)
    assert set(copied) == set(values)  # none lost
    if exactly_once:
        assert copied == values
    else:  # at least once: the first copies in order
        assert sorted(set(copied), key=copied.index) == values


def test_a_resumed_mirror_walks_the_source_log_once_not_twice(tmp_path, monkeypatch):
    """A read_committed mirror's run costs one walk of the source partitions' batch headers (its
    consumer's read_committed view): it also asked Store.offsets(committed=True) for the ends, whose
    last stable offset walked every batch header once more, each run, however little was new."""
    from klog.store.segment import LogSegment

    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    batches = 100
    with klog.open(src) as store:
        store.create_topic("t", partitions=1)
        with store.producer() as producer:
            for i in range(batches):
                producer.send("t", str(i).encode())
                producer.flush()  # (a batch each)
    with klog.open(src, create=False) as store, klog.open(dst) as dest:
        Mirror(store, dest, ["t"], mirror_id="m").run()
    with klog.open(src, create=False) as store:
        with store.producer() as producer:
            producer.send("t", b"new")
    walked = [0]
    iter_headers = LogSegment.iter_headers

    def counted(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        for item in iter_headers(self, *args, **kwargs):
            walked[0] += 1
            yield item

    monkeypatch.setattr(LogSegment, "iter_headers", counted)
    with klog.open(src, create=False) as store, klog.open(dst) as dest:
        stats = Mirror(store, dest, ["t"], mirror_id="m").run()
    assert stats.records == 1
    assert walked[0] <= batches + 10
    assert _dest_values(dst)[-1] == b"new"


def test_a_copy_whose_source_stops_answering_is_an_error_not_a_short_copy(tmp_path, monkeypatch):
    """Without --follow, nothing arriving for IDLE_DONE_S (2 s) while records were left ended the copy
    as if complete: exit 0 and 'mirrored N records' (a `klog serve` source paused for 5 s: 62,137 of
    200,010 copied). It is an error naming what was left (through a cluster after its timeout); what
    was copied is checkpointed, and the rerun copies the rest."""
    from klog.errors import KlogError

    src, dst, values = _source(tmp_path, 100)
    poll = mirror_module._poll
    monkeypatch.setattr(mirror_module, "_poll", lambda consumer: [])  # the source stops answering
    monkeypatch.setattr(mirror_module, "IDLE_DONE_S", 0.3)
    with klog.open(src, create=False) as store, klog.open(dst) as dest:
        with pytest.raises(KlogError, match="for 0.3 s while 100 were left to copy: stopped after 0 "):
            Mirror(store, dest, ["t"], mirror_id="m").run()
    monkeypatch.setattr(mirror_module, "_poll", poll)
    with klog.open(src, create=False) as store, klog.open(dst) as dest:
        assert Mirror(store, dest, ["t"], mirror_id="m").run().records == 100
    assert _dest_values(dst) == values


@pytest.mark.slow
def test_a_cluster_source_paused_past_its_timeout_fails_the_copy_and_the_rerun_completes_it(tmp_path):
    """`klog serve` as SRC, stopped (SIGSTOP) in the middle of a copy for longer than
    KLOG_CLUSTER_TIMEOUT: the mirror exits 1 with one line (it exited 0, 'mirrored N records', N short),
    and once the source answers again the rerun copies the rest, nothing twice."""
    import os
    import re
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import REPO

    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    total = 60_000  # 120 MB: more than librdkafka fetches ahead (64 MiB queued), so the pause stops the copy
    pad = b"x" * 2000
    with klog.open(src) as store:
        store.create_topic("t", partitions=1)
        with store.producer() as producer:
            for i in range(total):
                producer.send("t", str(i).encode() + pad)
    env = {**os.environ, "PYTHONPATH": REPO, "KLOG_CLUSTER_TIMEOUT": "3"}
    server = subprocess.Popen([sys.executable, "-m", "klog", "serve", "-d", src, "-l", "127.0.0.1:0"], env=env,
                              stderr=subprocess.PIPE, text=True)
    try:
        line = server.stderr.readline()  # 'klog serve: listening on 127.0.0.1:PORT ...'
        found = re.search(r"listening on (127\.0\.0\.1:\d+)", line)
        assert found, line
        source = f"kafka://{found.group(1)}"
        mirror = subprocess.Popen([sys.executable, "-m", "klog", "mirror", source, dst, "t"], env=env,
                                  stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and _copied(dst) == 0 and mirror.poll() is None:
                time.sleep(0.05)
            at_pause = _copied(dst)
            server.send_signal(signal.SIGSTOP)
            try:
                _, err = mirror.communicate(timeout=60)
            finally:
                server.send_signal(signal.SIGCONT)
        finally:
            if mirror.poll() is None:
                mirror.kill()
                mirror.wait()
        copied = _copied(dst)
        if copied == total:
            pytest.skip(f"the copy ended before the source was paused ({at_pause} copied then)")
        assert mirror.returncode == 1, err
        assert err.count("\n") == 1 and "no records came from the source for 3 s while" in err, err
        again = subprocess.run([sys.executable, "-m", "klog", "mirror", source, dst, "t"], env=env,
                               capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=30)
    assert _dest_values(dst) == [str(i).encode() + pad for i in range(total)]


def _copied(path: str) -> int:
    from klog.errors import KlogError

    try:
        with klog.open(path, create=False) as store:
            return store.offsets("t", -1)[0] or 0 if store.has_topic("t") else 0
    except KlogError:  # the mirror is creating DEST right now
        return 0


@pytest.mark.slow
def test_a_mirror_start_reads_its_latest_checkpoints_not_every_one_written(tmp_path):
    """A following mirror writes a checkpoint per partition a second into DEST's compacted
    __klog_mirror_checkpoints, and each start reads that topic whole. A local DEST compacted it only on
    `klog topics clean` (and never its 1 GiB active segment): 1,000,000 checkpoints (a day of a
    10-partition mirror) made every start take ~11 s, growing for good. Now small segments, compacted
    when due at each start: what a start reads stays ~one segment, whatever the history."""
    import json

    from klog.client.mirror import CHECKPOINT_TOPIC

    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    with klog.open(src) as store:
        store.create_topic("t", partitions=10)
        with store.producer() as producer:
            for p in range(10):
                producer.send("t", b"v", partition=p)
    with klog.open(src, create=False) as store, klog.open(dst) as dest:
        dest.create_topic(CHECKPOINT_TOPIC, 1, configs={"cleanup.policy": "compact"})  # (as an earlier klog did)
        Mirror(store, dest, ["t"], mirror_id="m").run()
        # a long-following mirror's history of checkpoints (the last: each partition's offset 1)
        key = Mirror(store, dest, ["t"], mirror_id="m")._checkpoint_key
        with dest.producer() as producer:
            for i in range(8_000, 0, -1):
                for p in range(10):
                    producer.send(CHECKPOINT_TOPIC, json.dumps({"next_offset": 1 if i == 1 else i}).encode(),
                                  key=key("t", p), partition=0)
    with klog.open(src, create=False) as store:
        with store.producer() as producer:
            producer.send("t", b"new", partition=4)
    with klog.open(src, create=False) as store, klog.open(dst) as dest:
        stats = Mirror(store, dest, ["t"], mirror_id="m").run()
    assert (stats.records, stats.resumed) == (1, 10)
    with klog.open(dst, create=False) as dest:
        read_at_start = sum(1 for _ in dest.consumer(CHECKPOINT_TOPIC))
    assert read_at_start < 20_000  # (80,000 written; one 1 MiB segment holds ~16,000)


def test_a_checkpoint_topic_that_cannot_be_compacted_is_said_and_the_copy_goes_on(tmp_path, monkeypatch):
    from klog.client.store import Store
    from klog.errors import CorruptLogError

    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    with klog.open(src) as store:
        store.create_topic("t", partitions=1)
        with store.producer() as producer:
            producer.send("t", b"a")
    with klog.open(src, create=False) as store, klog.open(dst) as dest:
        Mirror(store, dest, ["t"], mirror_id="m").run()
        with store.producer() as producer:
            producer.send("t", b"b")

    def damaged(self, topic=None, **kwargs):  # noqa: ANN001, ANN003, ANN202
        raise CorruptLogError("cannot compact __klog_mirror_checkpoints-0: a damaged batch at offset 3")

    monkeypatch.setattr(Store, "clean", damaged)
    warnings: list[str] = []
    with klog.open(src, create=False) as store, klog.open(dst) as dest:
        assert Mirror(store, dest, ["t"], mirror_id="m", on_warning=warnings.append).run().records == 1
    assert warnings == ["__klog_mirror_checkpoints not compacted: cannot compact __klog_mirror_checkpoints-0: "
                        "a damaged batch at offset 3"]
    assert _dest_values(dst) == [b"a", b"b"]
