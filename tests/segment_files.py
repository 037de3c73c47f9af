"""What the damage and compaction tests share: a partition's segment files found, walked batch by
batch and damaged byte by byte; numbered records written batch by batch; compacted topics written a
batch a key, their batch headers listed, and read back through confluent-kafka to the partition's end."""

from __future__ import annotations

import glob
import os
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from klog.store.codec import BatchHeader


# -- segment files, damaged byte by byte ---------------------------------------------------------
def segment_paths(data_dir: str, topic: str = "t", partition: int = 0) -> list[str]:
    """The partition's `.log` files in the store at `data_dir`, oldest first."""
    return sorted(glob.glob(os.path.join(data_dir, "logs", f"{topic}-{partition}", "*.log")))


def segment_path(data_dir: str, topic: str = "t", partition: int = 0) -> str:
    """The partition's one `.log` file (the test wrote a single segment)."""
    [path] = segment_paths(data_dir, topic, partition)
    return path


def batch_positions(path: str) -> list[int]:
    """Where each batch of the (undamaged) segment file starts."""
    with open(path, "rb") as f:
        data = f.read()
    out, at = [], 0
    while at < len(data):
        out.append(at)
        at += 12 + struct.unpack_from(">i", data, at + 8)[0]
    return out


def write_numbered_batches(store: Any, topic: str, batches: int, per_batch: int) -> None:  # noqa: ANN401
    """Records b"0", b"1", ... into partition 0 of `topic`, `per_batch` a batch (flushed each), `batches`
    batches: batch n holds the records n * per_batch onwards."""
    with store.producer() as p:
        for b in range(batches):
            for i in range(per_batch):
                p.send(topic, b"%d" % (b * per_batch + i), partition=0)
            p.flush()


def write_at(path: str, at: int, data: bytes) -> None:
    """Overwrite the file's bytes at `at` with `data`."""
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


def flip_bit(path: str, at: int) -> None:
    """Flip the lowest bit of the file's byte at `at`."""
    with open(path, "rb") as f:
        f.seek(at)
        byte = f.read(1)[0]
    write_at(path, at, bytes([byte ^ 0x01]))


def numbered_lines(lo: int, hi: int) -> bytes:
    """b"lo\\n...(hi-1)\\n": what `klog produce` is given, and `klog consume` prints back."""
    return b"".join(b"%d\n" % i for i in range(lo, hi))


# -- compacted topics ----------------------------------------------------------------------------
def write_keys(store: Any, topic: str, keys: list[bytes], ts: int, *, step: int = 1,  # noqa: ANN401
               value: bytes = b"v" * 30) -> None:
    """One batch a key into partition 0: `value` under each key, the i-th at timestamp ts + i * step."""
    with store.producer() as p:
        for i, key in enumerate(keys):
            p.send(topic, value, key=key, partition=0, timestamp=ts + i * step)
            p.flush()


def leader_headers(store: Any, topic: str, partition: int = 0) -> list[BatchHeader]:  # noqa: ANN401
    """The header of every batch in the partition leader's segments, in order."""
    leader = store.partition(topic, partition).leader
    leader.refresh_segments()
    return [h for base in leader.bases
            for _, h in leader.segments[base].iter_headers(0, leader.segments[base].file_size())]


def poll_to_end(consumer: Any, limit_s: float = 20.0,  # noqa: ANN401 - a confluent_kafka.Consumer
                enough: Callable[[list], bool] = lambda got: True,
                partitions: int = 1) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of each record a confluent-kafka consumer (assigned `partitions`
    partitions, enable.partition.eof set) polls, until each partition has reported its end and
    `enough(got)`, or `limit_s` passed; the consumer closed."""
    import confluent_kafka as ck

    got: list[tuple[int, bytes | None, bytes | None]] = []
    ended: set[int] = set()
    deadline = time.monotonic() + limit_s
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == ck.KafkaError._PARTITION_EOF:
                    ended.add(msg.partition())
                    if len(ended) == partitions and enough(got):
                        break
                continue
            got.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return got
