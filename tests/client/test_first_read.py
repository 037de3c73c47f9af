"""A consumer's first read of a partition is small and the next ones double up to the full size:
`klog consume t -n 1` on a big topic decodes 64 KiB, not a megabyte of records, and a whole read
still gets every record once, in order."""

from __future__ import annotations

import klog
from klog.client.consumer import FIRST_READ_BYTES
from klog.store.limits import PARTITION_READ_BYTES_DEFAULT
from klog.store.partition import Partition

RECORDS = 4_000
VALUE = b"v" * 600  # ~2.5 MB in batches of 50 records (~30 KiB each)


def test_reads_start_small_and_double_up_to_the_full_size(tmp_path, monkeypatch) -> None:
    sizes: list[int] = []
    read = Partition.read

    def spy(self, offset, max_bytes=PARTITION_READ_BYTES_DEFAULT, *args, **kwargs):
        sizes.append(max_bytes)
        return read(self, offset, max_bytes, *args, **kwargs)

    with klog.Store(str(tmp_path / "data")) as store:
        store.create_topic("big", partitions=1)
        with store.producer() as producer:
            for i in range(RECORDS):
                producer.send("big", VALUE + b"%d" % i, partition=0)
                if i % 50 == 49:
                    producer.flush()  # one batch of 50 records
        monkeypatch.setattr(Partition, "read", spy)

        first = next(iter(store.consumer("big", count=1)))
        assert first.value == VALUE + b"0" and sizes == [FIRST_READ_BYTES]

        sizes.clear()
        values = [r.value for r in store.consumer("big")]
    assert values == [VALUE + b"%d" % i for i in range(RECORDS)]
    assert FIRST_READ_BYTES << 4 == PARTITION_READ_BYTES_DEFAULT
    assert sizes[:5] == [FIRST_READ_BYTES << k for k in range(5)]
    assert set(sizes[5:]) == {PARTITION_READ_BYTES_DEFAULT}
