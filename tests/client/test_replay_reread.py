"""`klog replay --group` re-read: where a resumed replay starts after a read that ended on offsets
holding no record for it (an aborted transaction, its marker).

What a user sees: a rerun with nothing new has nothing to read (its progress bar's total is 0), however
large the aborted transaction that ended the source; records written after it are replayed once.
"""

from __future__ import annotations

import klog


def test_a_resumed_replay_does_not_read_an_aborted_transaction_again(tmp_path):
    with klog.open(str(tmp_path / "src")) as store:
        store.create_topic("t", partitions=1)
        with store.producer() as plain:
            plain.send("t", b"a")
            plain.send("t", b"b")  # offsets 0-1
        with store.producer(transactional_id="tx") as producer:
            producer.begin()
            producer.send_keyed("t", [(None, b"aborted%d" % i) for i in range(5)])  # 2-6
            producer.flush()
            producer.abort()  # its marker: 7; the log ends at 8

        def replay():  # noqa: ANN202
            replayer = store.replayer("t", "u", group="g")
            try:
                return replayer.stats.total, replayer.run().records
            finally:
                replayer.close()

        assert replay() == (8, 2)
        # it resumed at offset 2: 6 offsets read again to find nothing (an aborted transaction of any size)
        assert replay() == (0, 0)
        with store.producer() as plain:
            plain.send("t", b"c")
        assert replay() == (1, 1)
        with store.consumer("u", isolation_level="read_committed") as consumer:
            assert [r.value for r in consumer] == [b"a", b"b", b"c"]
