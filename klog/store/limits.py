"""Size limits of the data path, in one place, each named with its unit and tied to the others
by assertions (they were written in several files, and one name meant different sizes)."""

from __future__ import annotations

from klog.store.format import RECORD_BATCH_OVERHEAD

# Kafka's max.message.bytes default: 1 MiB of batch plus the 12-byte log overhead (a topic config)
MAX_MESSAGE_BYTES_DEFAULT = 1_048_588
# what a producer puts in one batch unless told otherwise: under MAX_MESSAGE_BYTES_DEFAULT
PRODUCER_BATCH_BYTES_DEFAULT = 1_000_000
# what a producer holds of records not yet written, over all its partitions (Kafka's
# buffer.memory default); past it, the fullest batches are written
PRODUCER_BUFFER_BYTES_DEFAULT = 32 << 20
# one read of a partition of this store, unless the reader asks for another size (Kafka's
# max.partition.fetch.bytes default); a larger batch is still returned whole
PARTITION_READ_BYTES_DEFAULT = 1 << 20
# what one Consumer.poll() (and so klog mirror's read loop) reads over all its partitions before
# it returns: whole partition reads taken in turn, from where the last poll stopped (Kafka's
# fetch.max.bytes plays this part). One read of every partition per poll held a topic of 1,000
# partitions' reads at once, with their decoded records: memory grew with partitions and data.
POLL_READ_BYTES = 8 << 20
# what a consumer merging partitions by timestamp reads at a time over all of them: each holds a
# read while the merge waits on its next record, so they share this (1,000 partitions read ~32 KB
# each; 32 or fewer read PARTITION_READ_BYTES_DEFAULT), down to MERGED_READ_BYTES_MIN a read. A
# batch larger than a share still comes whole.
MERGED_READ_BYTES = 32 << 20
MERGED_READ_BYTES_MIN = 16 << 10
# one read of a partition by the Spark source: ~40 k records of 100 bytes, a good Arrow batch
SPARK_PARTITION_READ_BYTES = 4 << 20
# a partition's share of one Fetch answer the cluster client asks a broker for (its
# max.partition.fetch.bytes): ~150,000 records of 100 B a round trip (librdkafka's default of 1 MiB
# makes a partition read alone wait on ten times as many)
CLUSTER_PARTITION_FETCH_BYTES = 16 << 20
# a declared batchLength above this is damage, not data (readers and recovery stop there)
DECLARED_BATCH_BYTES_MAX = 1 << 30
# a compressed batch may not expand beyond this (a decompression bomb is damage)
DECOMPRESSED_BATCH_BYTES_MAX = 256 << 20
# A compressed batch may expand to its topic's max.message.bytes, or to this many times its own size
# when that is more: real data compresses 2-20x, a decompression bomb thousands of times (2 x 120 MiB
# of records in 7.7 KB), which every reader of the batch would otherwise hold in memory
EXPANSION_RATIO_MAX = 100


def batch_expansion_bytes_max(batch_bytes: int, max_message_bytes: int = MAX_MESSAGE_BYTES_DEFAULT) -> int:
    """How far a compressed batch of `batch_bytes` may expand before it counts as a decompression bomb
    (`dirs import` refuses such a batch, readers report it as damage)."""
    return max(max_message_bytes, EXPANSION_RATIO_MAX * batch_bytes)


def read_expansion_bytes_max(batch_bytes: int, max_message_bytes: int = MAX_MESSAGE_BYTES_DEFAULT) -> int:
    """The bound a reader (consume, verify) decompresses a stored batch to: batch_expansion_bytes_max,
    never past DECOMPRESSED_BATCH_BYTES_MAX."""
    return min(batch_expansion_bytes_max(batch_bytes, max_message_bytes), DECOMPRESSED_BATCH_BYTES_MAX)


assert PRODUCER_BATCH_BYTES_DEFAULT + RECORD_BATCH_OVERHEAD <= MAX_MESSAGE_BYTES_DEFAULT
# a default batch fits one read
assert MAX_MESSAGE_BYTES_DEFAULT <= PARTITION_READ_BYTES_DEFAULT + RECORD_BATCH_OVERHEAD + 12
assert PARTITION_READ_BYTES_DEFAULT <= SPARK_PARTITION_READ_BYTES <= CLUSTER_PARTITION_FETCH_BYTES
assert MAX_MESSAGE_BYTES_DEFAULT <= DECOMPRESSED_BATCH_BYTES_MAX <= DECLARED_BATCH_BYTES_MAX
