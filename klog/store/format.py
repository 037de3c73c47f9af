"""Kafka's on-disk format constants, in one place (see ../shared/kafka-log-format.md).

Each RecordBatch v2 header field is an OFFSET/LENGTH pair derived from the one before it,
ending at RECORD_BATCH_OVERHEAD (61), the way Kafka's DefaultRecordBatch lays it out.
"""

from __future__ import annotations

import struct

# --- RecordBatch v2 header (§1) -------------------------------------------------------------
BASE_OFFSET_OFFSET = 0
BASE_OFFSET_LENGTH = 8
LENGTH_OFFSET = BASE_OFFSET_OFFSET + BASE_OFFSET_LENGTH  # 8
LENGTH_LENGTH = 4
LOG_OVERHEAD = LENGTH_OFFSET + LENGTH_LENGTH  # 12: bytes before batchLength starts counting
PARTITION_LEADER_EPOCH_OFFSET = LOG_OVERHEAD  # 12
PARTITION_LEADER_EPOCH_LENGTH = 4
MAGIC_OFFSET = PARTITION_LEADER_EPOCH_OFFSET + PARTITION_LEADER_EPOCH_LENGTH  # 16
MAGIC_LENGTH = 1
CRC_OFFSET = MAGIC_OFFSET + MAGIC_LENGTH  # 17
CRC_LENGTH = 4
ATTRIBUTES_OFFSET = CRC_OFFSET + CRC_LENGTH  # 21: the CRC covers [21, end)
ATTRIBUTE_LENGTH = 2
LAST_OFFSET_DELTA_OFFSET = ATTRIBUTES_OFFSET + ATTRIBUTE_LENGTH  # 23
BASE_TIMESTAMP_OFFSET = LAST_OFFSET_DELTA_OFFSET + 4  # 27
MAX_TIMESTAMP_OFFSET = BASE_TIMESTAMP_OFFSET + 8  # 35
PRODUCER_ID_OFFSET = MAX_TIMESTAMP_OFFSET + 8  # 43
PRODUCER_EPOCH_OFFSET = PRODUCER_ID_OFFSET + 8  # 51
BASE_SEQUENCE_OFFSET = PRODUCER_EPOCH_OFFSET + 2  # 53
RECORDS_COUNT_OFFSET = BASE_SEQUENCE_OFFSET + 4  # 57
RECORDS_OFFSET = RECORDS_COUNT_OFFSET + 4  # 61
RECORD_BATCH_OVERHEAD = RECORDS_OFFSET
assert RECORD_BATCH_OVERHEAD == 61
assert ATTRIBUTES_OFFSET == 21

MAGIC_V2 = 2
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
KLOG_LEADER_EPOCH = 0  # a single-leader store stamps epoch 0 unless replication bumps it

# Whole header: baseOffset, batchLength, leaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount.
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
assert BATCH_HEADER.size == RECORD_BATCH_OVERHEAD
# The part the CRC covers, from attributes to recordsCount.
CRC_COVERED_HEADER = struct.Struct(">hiqqqhii")
assert CRC_COVERED_HEADER.size == RECORD_BATCH_OVERHEAD - ATTRIBUTES_OFFSET
# The prefix written outside the CRC: baseOffset, batchLength, leaderEpoch, magic, crc.
BATCH_PREFIX = struct.Struct(">qiibI")
assert BATCH_PREFIX.size == ATTRIBUTES_OFFSET
BASE_OFFSET = struct.Struct(">q")
INT32 = struct.Struct(">i")
INT16 = struct.Struct(">h")

# attributes (§1)
COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

CREATE_TIME = 0
LOG_APPEND_TIME = 1
TIMESTAMP_TYPE_NAMES = {CREATE_TIME: "CreateTime", LOG_APPEND_TIME: "LogAppendTime"}

# A batch needs at least the size fields to be framed (Kafka: HEADER_SIZE_UP_TO_MAGIC = 17).
HEADER_SIZE_UP_TO_MAGIC = MAGIC_OFFSET + MAGIC_LENGTH

# --- Index files (§2) -----------------------------------------------------------------------
OFFSET_INDEX_ENTRY = struct.Struct(">ii")  # relativeOffset, position
TIME_INDEX_ENTRY = struct.Struct(">qi")  # timestamp, relativeOffset
assert OFFSET_INDEX_ENTRY.size == 8
assert TIME_INDEX_ENTRY.size == 12
RELATIVE_OFFSET_MAX = 2**31 - 1

# --- File names (§0) -------------------------------------------------------------------------
LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
TEMP_SUFFIX = ".tmp"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"


def segment_file_name(base_offset: int, suffix: str) -> str:
    """`%020d` + suffix, so that name order is offset order."""
    assert base_offset >= 0, base_offset
    return f"{base_offset:020d}{suffix}"


OFFSET_MAX = (1 << 63) - 1  # offsets are int64


def parse_segment_base(name: str) -> int | None:
    """Base offset of a segment file name, or None if it is not one."""
    stem, dot, _ = name.partition(".")
    if len(stem) != 20 or not stem.isascii() or not stem.isdigit() or not dot:
        return None
    base = int(stem)
    return base if base <= OFFSET_MAX else None  # 99999999999999999999.log is no offset Kafka can have


def partition_dir_name(topic: str, partition: int) -> str:
    assert partition >= 0, partition
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """Split `<topic>-<partition>` at the last '-' (topics may contain '-')."""
    topic, dash, number = name.rpartition("-")
    if not dash or not topic or not number.isdigit():
        return None
    return topic, int(number)
