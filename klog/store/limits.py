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

assert PRODUCER_BATCH_BYTES_DEFAULT + RECORD_BATCH_OVERHEAD <= MAX_MESSAGE_BYTES_DEFAULT
# a default batch fits one read
assert MAX_MESSAGE_BYTES_DEFAULT <= PARTITION_READ_BYTES_DEFAULT + RECORD_BATCH_OVERHEAD + 12
assert PARTITION_READ_BYTES_DEFAULT <= SPARK_PARTITION_READ_BYTES <= CLUSTER_PARTITION_FETCH_BYTES
assert MAX_MESSAGE_BYTES_DEFAULT <= DECOMPRESSED_BATCH_BYTES_MAX <= DECLARED_BATCH_BYTES_MAX
