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
# one read of a partition by a consumer (Kafka's max.partition.fetch.bytes default); a larger
# batch is still returned whole
FETCH_BYTES_MAX = 1 << 20
# a declared batchLength above this is damage, not data (readers and recovery stop there)
DECLARED_BATCH_BYTES_MAX = 1 << 30
# a compressed batch may not expand beyond this (a decompression bomb is damage)
DECOMPRESSED_BATCH_BYTES_MAX = 256 << 20

assert PRODUCER_BATCH_BYTES_DEFAULT + RECORD_BATCH_OVERHEAD <= MAX_MESSAGE_BYTES_DEFAULT
assert MAX_MESSAGE_BYTES_DEFAULT <= FETCH_BYTES_MAX + RECORD_BATCH_OVERHEAD + 12  # a default batch fits a fetch
assert MAX_MESSAGE_BYTES_DEFAULT <= DECOMPRESSED_BATCH_BYTES_MAX <= DECLARED_BATCH_BYTES_MAX
