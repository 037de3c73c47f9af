"""Values-only reads of one partition by Kafka Fetch requests over one socket (kio), decoded by the
local store's batch decoder (reader.Fetched.values): the path of `klog consume -b ... t > file`.

librdkafka hands Python one Message object per record (~0.7 µs each, more than the local store's
whole read); here a fetch is one bytes object of record batches, split into values by the same code
the local consumer uses. Only a bounded read_uncommitted read of one partition takes this path, and
only when this socket can speak the cluster's security settings (wire.security); anything it does
not expect before its first records makes the caller use librdkafka instead (Unsupported).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

from klog.client.remote import wire
from klog.errors import KlogError, UsageError

FETCH_VERSION = 4  # the newest non-flexible Fetch (wire.Connection speaks request header v1)
FETCH_WAIT_MS = 10
FETCH_BYTES_MAX = 64 << 20
PARTITION_BYTES_MAX = 16 << 20
FETCH_KEY = 1


class Unsupported(Exception):  # noqa: N818 - a signal to the caller, not an error for the user
    """This path cannot read the partition: use librdkafka's consumer."""


def partition_values(store, topic: str, partition: int, start: int, stop: int,  # noqa: ANN001 - RemoteStore
                     null: bytes | None) -> Iterator[tuple[list[bytes | None], int]]:
    """(values, next offset) of each fetch of `topic`-`partition` from `start` up to `stop`.

    Raises Unsupported before its first yield when it cannot read the partition; a failure after
    that is a KlogError (the caller has output records already)."""
    from klog.store import codec
    from klog.store.log import FetchedBatch
    from klog.store.reader import Fetched

    conn = _leader_connection(store, topic, partition)
    offset, yielded = start, False
    last_progress = time.monotonic()
    try:
        while offset < stop:
            try:
                error, blob = _partition_answer(conn.call_raw(FETCH_KEY, FETCH_VERSION,
                                                              _fetch_request(topic, partition, offset)))
            except (KlogError, struct.error, ValueError) as e:
                if not yielded:
                    raise Unsupported(str(e)) from None
                raise KlogError(f"cannot read {topic}-{partition} from {store.target.label}: {e}") from None
            if error:
                if not yielded:
                    raise Unsupported(wire.error_name(error))
                raise KlogError(f"cannot read {topic}-{partition} from {store.target.label}: {wire.error_name(error)}")
            batches, pos = [], 0
            while pos < len(blob) and pos + codec.header_bytes(blob, pos) <= len(blob):
                header = codec.read_header(blob, pos)
                if header.size < codec.min_batch_size(header.magic):
                    raise KlogError(f"cannot read {topic}-{partition} from {store.target.label}: a batch at "
                                    f"offset {header.base_offset} of {header.size} bytes")
                if pos + header.size > len(blob):
                    break  # the cut last batch of a full answer: fetched again next time
                batches.append(FetchedBatch(header, bytes(blob[pos:pos + header.size]), 0, pos))
                pos += header.size
            if not batches:
                # nothing whole: the records left may be gone (retention) or not yet readable
                if time.monotonic() - last_progress > store.timeout:
                    raise KlogError(f"no records from {store.target.label} for {store.timeout:g} s "
                                    "while records were left to read")
                if not yielded and not blob:
                    raise Unsupported("empty fetch")
                time.sleep(FETCH_WAIT_MS / 1000)
                continue
            last_progress = time.monotonic()
            fetched = Fetched(batches, offset, stop, _skip_control)
            offset = min(max(fetched.next_offset, offset), stop)
            yielded = True
            yield fetched.values(null), offset
    finally:
        conn.close()


def _fetch_request(topic: str, partition: int, offset: int) -> bytes:
    """Fetch v4 for one partition: replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level
    (read_uncommitted), then [topic [partition, fetch_offset, partition_max_bytes]]."""
    name = topic.encode()
    return (struct.pack(">iiiibi", -1, FETCH_WAIT_MS, 1, FETCH_BYTES_MAX, 0, 1)
            + struct.pack(">h", len(name)) + name + struct.pack(">iiqi", 1, partition, offset, PARTITION_BYTES_MAX))


def _partition_answer(body: memoryview) -> tuple[int, memoryview]:
    """(error code, records) of a Fetch v4 answer for one partition: throttle_time_ms, then
    [topic [partition, error_code, high_watermark, last_stable_offset, aborted_transactions, records]]."""
    pos = 4 + 4  # throttle time, topic count
    (name_len,) = struct.unpack_from(">h", body, pos)
    pos += 2 + name_len + 4 + 4  # topic name, partition count, partition index
    error, _, _, aborted = struct.unpack_from(">hqqi", body, pos)
    pos += 2 + 8 + 8 + 4 + max(aborted, 0) * 16  # aborted transactions: producer id, first offset
    (size,) = struct.unpack_from(">i", body, pos)
    pos += 4
    if size > len(body) - pos:
        raise ValueError("a Fetch answer shorter than it says")
    return error, body[pos:pos + max(size, 0)]


def _skip_control(fb) -> bool:  # noqa: ANN001 - FetchedBatch
    return fb.header.is_control


def _leader_connection(store, topic: str, partition: int) -> wire.Connection:  # noqa: ANN001 - RemoteStore
    """A connection to the partition's leader, with the -X security settings; Unsupported when this
    socket cannot speak them or the leader is not known."""
    try:
        sec = wire.security(store.target)
        md = store._metadata(topic)
        leader = md.topics[topic].partitions[partition].leader
        broker = md.brokers[leader]
        return wire.Connection(broker.host, broker.port, store.timeout, sec)
    except (UsageError, KlogError, KeyError, AttributeError) as e:
        raise Unsupported(str(e)) from None
