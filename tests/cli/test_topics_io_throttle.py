"""`klog topics clean|compact --io-max-bytes-per-second`: compaction paced by Kafka's Throttler, as
log.cleaner.io.max.bytes.per.second does in `klog serve`; unthrottled without the option."""

from __future__ import annotations

import klog
from klog.store import throttle


def dirty_topic(data_dir: str) -> None:
    with klog.open(data_dir) as store:
        store.create_topic("changelog", partitions=1, configs={
            "cleanup.policy": "compact", "segment.bytes": "300", "min.cleanable.dirty.ratio": "0.01"})
        with store.producer() as p:
            for r in range(8):
                for k in range(5):
                    p.send("changelog", b"v%d" % r, key=b"k%d" % k, partition=0)
                p.flush()


def test_the_option_paces_compaction_and_a_bad_rate_is_refused(cli, data_dir, monkeypatch):
    dirty_topic(data_dir)
    made: list[throttle.Throttler] = []
    real = throttle.cleaner_throttler
    monkeypatch.setattr(throttle, "cleaner_throttler", lambda rate: made.append(real(rate)) or made[-1])
    bad = cli("topics", "compact", "changelog", "--io-max-bytes-per-second", "0")
    assert bad.exit_code == 2 and "--io-max-bytes-per-second must be above 0" in bad.stderr
    assert "Traceback" not in bad.stderr and not made
    assert cli("topics", "clean", "--io-max-bytes-per-second", "1e9").exit_code == 0
    assert made and made[0].bytes_per_second == 1e9 and made[0].observed_bytes > 0
    with klog.open(data_dir) as store:
        assert store.dirty_ratio("changelog", 0) == 0.0
