"""klog's one error vocabulary.

The library raises these and never prints or exits; the CLI maps each class to a
one-line message and an exit code (see klog/cli/app.py).
"""

from __future__ import annotations


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


class DataDirError(KlogError):
    """The data directory is missing, unwritable or not a klog store."""


class StorageError(KlogError):
    """An I/O failure in a log directory (full, read-only, gone)."""


class NotEnoughReplicasError(KlogError):
    """Fewer in-sync replicas than min.insync.replicas for an acks=all write."""


class GroupError(KlogError):
    """A consumer-group operation was refused (live members, fenced generation, ...)."""


class SparkUnavailableError(KlogError):
    """pyspark or Java is missing for a `klog spark` command."""


class StateLostError(KlogError):
    """A partition's state file (high watermark, log start) is missing or damaged over a log
    that holds data: readers cannot know where the committed records end."""


class SymlinkError(KlogError):
    """A store file or partition folder is a symbolic link: klog never follows one out of the store."""
