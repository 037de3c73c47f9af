"""Small helpers over kio's generated types, so one handler serves every version of its API."""

from __future__ import annotations

import dataclasses
import datetime
import functools
import uuid
from types import ModuleType
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType
from kio.static.primitive import i32Timedelta

from klog.protocol.schemas import payload_module

NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))
ZERO_UUID = uuid.UUID(int=0)
E = ErrorCode


@functools.cache
def response_module(api_key: int, version: int) -> ModuleType:
    return payload_module(api_key, version, EntityType.response)


def response_for(request: Any) -> ModuleType:
    """The kio module holding the response types of `request`'s API and version."""
    return response_module(int(request.__api_key__), int(request.__version__))


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def make(cls: type, **values: Any) -> Any:
    """`cls(**values)` keeping only the fields this version of `cls` has (newer versions add
    fields; a handler passes everything it knows and each version takes its own)."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def has_field(cls_or_obj: Any, name: str) -> bool:
    cls = cls_or_obj if isinstance(cls_or_obj, type) else type(cls_or_obj)
    return name in _field_names(cls)


def topic_uuid(topic_id: str) -> uuid.UUID:
    """klog's topic id (a UUID string in the topic metadata) as Kafka's UUID."""
    try:
        return uuid.UUID(topic_id)
    except (ValueError, TypeError):
        return ZERO_UUID


def leader_epoch_error(store: Any, topic: str, index: int, requested: Any) -> ErrorCode:
    """Kafka's check of a request's current_leader_epoch against the partition's, the epoch Metadata
    hands out (-1, or a version without the field: no check). Older: FENCED_LEADER_EPOCH (the client
    missed an election); newer: UNKNOWN_LEADER_EPOCH (this broker has not seen it yet). Both make a
    client refresh its metadata and retry. Raises the store's errors for an unknown partition."""
    if requested is None or int(requested) < 0:
        return ErrorCode.none
    partitions = store.topic(topic).partitions
    if not 0 <= index < len(partitions):
        from klog.errors import UnknownPartitionError

        raise UnknownPartitionError(f"topic '{topic}' has no partition {index}")
    current = partitions[index].leader_epoch
    if int(requested) < current:
        return ErrorCode.fenced_leader_epoch
    if int(requested) > current:
        return ErrorCode.unknown_leader_epoch
    return ErrorCode.none


class TopicIds:
    """Topic id -> name for requests that name topics by id (Fetch v13+), without listing every
    topic of the store per request: a map rebuilt only when an id is not in it, each hit checked
    against the topic's current metadata (a topic deleted, or created again under a new id, is not
    answered under its old id). Used from the server's threads."""

    def __init__(self, store: Any) -> None:
        import threading

        self._store = store
        self._names: dict[uuid.UUID, str] = {}
        self._lock = threading.Lock()

    def name(self, topic_id: uuid.UUID) -> str | None:
        name = self._names.get(topic_id)
        if name is not None and self._current(name) == topic_id:
            return name
        with self._lock:
            self._names = {topic_uuid(t.topic_id): t.name for t in self._store.list_topics()}
            return self._names.get(topic_id)

    def known_name(self, topic_id: uuid.UUID) -> str | None:
        """The name last seen for `topic_id`, reading nothing (the caller checks it is current)."""
        return self._names.get(topic_id)

    def _current(self, name: str) -> uuid.UUID | None:
        found = self._store.topics.find(name)  # one LMDB read: exact, even just after another process's change
        return None if found is None else topic_uuid(found.topic_id)
