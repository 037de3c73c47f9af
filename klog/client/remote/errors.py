"""librdkafka's errors as klog's: one vocabulary whichever backend raised them."""

from __future__ import annotations

from klog.errors import (
    InvalidConfigError,
    InvalidTopicError,
    KlogError,
    NotEnoughReplicasError,
    RecordTooLargeError,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
    UsageError,
)


def klog_error(e: BaseException, what: str = "") -> KlogError:
    """A KafkaException (or KafkaError) as the matching KlogError, with `what` as its context."""
    from confluent_kafka import KafkaError, KafkaException

    err = e.args[0] if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError) else e
    if not isinstance(err, KafkaError):
        return KlogError(f"{what}: {e}" if what else str(e))
    code = err.code()
    text = err.str()
    message = f"{what}: {text}" if what else text
    cls = {
        KafkaError.UNKNOWN_TOPIC_OR_PART: UnknownTopicError,
        KafkaError._UNKNOWN_TOPIC: UnknownTopicError,
        KafkaError._UNKNOWN_PARTITION: UnknownPartitionError,
        KafkaError.TOPIC_ALREADY_EXISTS: TopicExistsError,
        KafkaError.TOPIC_EXCEPTION: InvalidTopicError,
        KafkaError.INVALID_PARTITIONS: UsageError,
        KafkaError.INVALID_REPLICATION_FACTOR: UsageError,
        KafkaError.INVALID_CONFIG: InvalidConfigError,
        KafkaError.INVALID_REQUEST: UsageError,
        KafkaError.MSG_SIZE_TOO_LARGE: RecordTooLargeError,
        KafkaError.NOT_ENOUGH_REPLICAS: NotEnoughReplicasError,
        KafkaError._INVALID_ARG: UsageError,
        KafkaError.INVALID_MSG_SIZE: RecordTooLargeError,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND: NotEnoughReplicasError,
    }.get(code, KlogError)
    return cls(message)


def unsupported(e: BaseException) -> bool:
    """The broker lacks the API (an older or partial Kafka): the caller may fall back."""
    from confluent_kafka import KafkaError, KafkaException

    err = e.args[0] if isinstance(e, KafkaException) and e.args else None
    return isinstance(err, KafkaError) and err.code() in (KafkaError._UNSUPPORTED_FEATURE,
                                                          KafkaError.UNSUPPORTED_VERSION)


def config_error(e: BaseException) -> UsageError:
    """A client that would not start: a bad -X property (librdkafka names it)."""
    text = e.args[0].str() if e.args and hasattr(e.args[0], "str") else str(e)
    return UsageError(f"invalid Kafka client property: {text}")
