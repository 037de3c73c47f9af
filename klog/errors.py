"""klog's one error vocabulary.

The library raises these and never prints or exits; the CLI maps each class to a
one-line message and an exit code (see klog/cli/app.py).
"""

from __future__ import annotations

from typing import Any


class KlogError(Exception):
    """Base class: an operating error a user can act on (bad input, bad disk, bad state)."""

    exit_code = 1


class UsageError(KlogError):
    """The request itself is malformed (bad option value, bad spec)."""

    exit_code = 2


class InvalidTopicError(UsageError):
    """A topic name breaks Kafka's naming rules or collides with an existing topic."""


class InvalidConfigError(UsageError):
    """An unknown topic config name or a value out of range."""


class UnsafePathError(UsageError):
    """A path a user gave would place a file outside the data directory."""


class UnknownTopicError(KlogError):
    """The topic does not exist."""


class UnknownPartitionError(KlogError):
    """The partition does not exist in the topic."""


class PartitionClosedError(UnknownPartitionError):
    """The partition was closed (its topic deleted, or forgotten to be opened again) while this
    caller still held its object: nothing was done; open the partition again (a client sees
    UNKNOWN_TOPIC_OR_PARTITION, refreshes its metadata and retries)."""


class TopicExistsError(KlogError):
    """A topic with this name already exists."""


class RecordTooLargeError(KlogError):
    """A record (or batch) is larger than max.message.bytes."""


class OffsetOutOfRangeError(KlogError):
    """An offset below the log start or above the log end was asked for."""


class CorruptLogError(KlogError):
    """Bytes in a segment fail validation (CRC, size, structure) before the log's tail."""

    def __init__(self, message: str, path: str | None = None, position: int | None = None,
                 offset: int | None = None) -> None:
        where = []
        if path is not None:
            where.append(str(path))
        if position is not None:
            where.append(f"position {position}")
        if offset is not None:
            where.append(f"offset {offset}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.reason = message
        self.path = path
        self.position = position
        self.offset = offset


class CompressionError(CorruptLogError):
    """A compressed batch could not be decompressed."""


class UnsupportedCodecError(KlogError):
    """A batch uses a compression codec klog does not know."""


# klog.store.compression's two, raised where no log position is known (and ValueErrors, as a codec
# library's are); the batch readers (codec.py, legacy.py) raise them again as the two above.
class UnknownCodecIdError(ValueError):
    """The codec id is not one Kafka defines (0-4)."""

    def __init__(self, codec: int) -> None:
        super().__init__(f"unsupported compression codec id {codec!r}")
        self.codec = codec


class DecompressionError(ValueError):
    """Compressed data could not be decoded (corrupt, truncated or not that codec)."""

    def __init__(self, codec: int, codec_name: str, detail: str) -> None:
        # Keep it one line: cramjam messages can carry newlines from the Rust side.
        detail = " ".join(str(detail).split())
        super().__init__(f"cannot decompress {codec_name} data: {detail}")
        self.codec = codec


class DataDirError(KlogError):
    """The data directory is missing, unwritable or not a klog store."""


class StorageError(KlogError):
    """An I/O failure in a log directory (full, read-only, gone)."""


class DataLossError(StorageError):
    """Committed records were lost at recovery and nobody has acknowledged it yet: the partition
    takes no writes until `klog verify --repair` does (klog.broker.data_loss)."""


class LeaderAppendError(StorageError):
    """The leader's directory failed an append; the followers were put back as they were."""

    def __init__(self, message: str, why: str, stuck: list[Any] | None = None) -> None:
        super().__init__(message)
        self.why = why
        self.stuck = stuck or []  # followers (PartitionLogs) still holding the batch: they leave the ISR too


class NoLeaderError(StorageError):
    """No in-sync replica of the partition is healthy, and unclean election is off: a storage
    failure (full, read-only, missing directories), which Kafka's clients retry (KAFKA_STORAGE_ERROR)."""


class NotEnoughReplicasError(KlogError):
    """Fewer in-sync replicas than min.insync.replicas for an acks=all write."""


class GroupError(KlogError):
    """A consumer-group operation was refused (live members, fenced generation, ...)."""


class GroupFencedError(GroupError):
    """An offset commit from an old generation, an expelled member, or for a partition not held."""


class UnknownMemberError(GroupFencedError):
    """The member was expelled (session expired) or left; it has to join again."""


class SparkUnavailableError(KlogError):
    """pyspark or Java is missing for a `klog spark` command."""


class StateLostError(KlogError):
    """A partition's state file (high watermark, log start) is missing or damaged over a log
    that holds data: readers cannot know where the committed records end."""


class SymlinkError(KlogError):
    """A store file or partition folder is a symbolic link: klog never follows one out of the store."""


# -- producers: a batch the broker refuses, idempotence and transactions
class InvalidBatchError(KlogError):
    """A batch that is not a valid RecordBatch v2 (Kafka: CORRUPT_MESSAGE / INVALID_RECORD)."""

    def __init__(self, message: str, corrupt: bool = True, record_index: int | None = None) -> None:
        super().__init__(message)
        self.corrupt = corrupt  # False: well-formed but not acceptable (INVALID_RECORD)
        self.record_index = record_index  # the record at fault (Kafka's record_errors), if one is



class InvalidTimestampError(InvalidBatchError):
    """A CreateTime record outside the topic's message.timestamp.before/after.max.ms (INVALID_TIMESTAMP)."""

    def __init__(self, message: str, record_index: int) -> None:
        super().__init__(message, corrupt=False, record_index=record_index)

class DuplicateSequenceError(KlogError):
    """A retried batch already in the log: answered as a success with its original offsets."""

    def __init__(self, base_offset: int) -> None:
        super().__init__(f"duplicate batch (at offset {base_offset})")
        self.base_offset = base_offset


class OutOfOrderSequenceError(KlogError):
    """A sequence that does not follow the producer's last one (Kafka: OUT_OF_ORDER_SEQUENCE_NUMBER)."""


class InvalidProducerEpochError(KlogError):
    """A batch from an older epoch of a producer id (Kafka: INVALID_PRODUCER_EPOCH)."""


class UnknownProducerError(KlogError):
    """A sequence that is not 0 from a producer this partition has no state for."""


class InvalidTxnStateError(KlogError):
    """A transactional batch for a partition its transaction has not added (KIP-890: INVALID_TXN_STATE)."""


class ProducerFencedError(KlogError):
    """Another producer with the same transactional id took over: this one can do nothing more."""


class TxnStateError(KlogError):
    """A transition Kafka's coordinator would refuse; `code` is the Kafka error's name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


# -- security: users, ACLs, SCRAM, and a cluster refusing TLS or SASL
class UnknownUserError(KlogError):
    """No such SASL user (or not with that mechanism)."""


class AclError(ValueError):
    """An ACL binding or filter that Kafka would refuse (unknown type, bad principal, ...)."""


class ScramError(Exception):
    """The exchange failed: malformed message, unknown user or wrong password (one answer for all)."""


class SecurityError(KlogError):
    """TLS or SASL refused us: asking again (another bootstrap server, a retry) will not help."""


# -- the Kafka protocol
class FrameError(Exception):
    """A frame that cannot be parsed: the connection is closed (Kafka does the same)."""


class FetchUnsupported(KlogError):
    """The broker does not speak a Fetch version klog reads: asking again will not help."""


def log_warning(message: str) -> None:
    """The library's one default for a warning no caller asked to receive (no `on_warning` given):
    the `klog` logger, which Python prints on stderr unless the application configures logging.
    The CLI passes its own printer (klog/cli/session.py `warn`) everywhere instead."""
    import logging  # here: logging costs the hot commands' start-up, and the CLI never logs

    logging.getLogger("klog").warning(message)
