"""A connector's offsets as KIP-875's REST endpoints show and change them (GET, PATCH and DELETE
/connectors/{name}/offsets), for the standalone and the distributed worker alike.

A source connector's offsets are its records in connect-offsets: `{"partition": {<source partition>},
"offset": {<offset>}}`. A sink connector's are its consumer group's (`connect-<name>`) committed offsets:
`{"partition": {"kafka_topic": T, "kafka_partition": P}, "offset": {"kafka_offset": N}}`. A null offset
in a PATCH removes that partition's offset; DELETE removes them all. Both need the connector STOPPED
(its tasks gone), as Kafka requires, so no task commits over the change.
"""

from __future__ import annotations

import json
from typing import Any

from klog.connect import storage
from klog.errors import KlogError

ALTERED = "The offsets for this connector have been altered successfully"
RESET = "The offsets for this connector have been reset successfully"
NOT_STOPPED = ("Connectors must be in the STOPPED state before their offsets can be modified. This can be done for "
               "the specified connector by issuing a 'PUT' request to the '/connectors/{name}/stop' endpoint")


class OffsetsError(ValueError):
    """A request body KIP-875 refuses (HTTP 400), with its reason."""


class TasksStillRunning(RuntimeError):
    """The connector is STOPPED but some worker still runs one of its tasks (HTTP 409: try again)."""


def sink_group(name: str) -> str:
    return f"connect-{name}"


def list_offsets(store, offsets: storage.OffsetStore, name: str, kind: str) -> list[dict]:  # noqa: ANN001
    if kind == "source":
        offsets.reload()  # what other workers (or this one's tasks) wrote since
        return [{"partition": json.loads(p), "offset": o} for p, o in sorted(offsets.of(name).items())]
    try:
        rows = store.describe_group(sink_group(name)).partitions
    except KlogError:  # no group yet: the sink never committed
        return []
    return [{"partition": {"kafka_topic": r.topic, "kafka_partition": r.partition},
             "offset": {"kafka_offset": r.committed}} for r in rows if r.committed is not None]


def _entries(body: Any) -> list[tuple[dict, dict | None]]:
    if not isinstance(body, dict) or not isinstance(body.get("offsets"), list):
        raise OffsetsError('the body is {"offsets": [{"partition": {...}, "offset": {...}}, ...]}')
    out = []
    for entry in body["offsets"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("partition"), dict):
            raise OffsetsError("each offset needs a 'partition' object")
        offset = entry.get("offset")
        if offset is not None and not isinstance(offset, dict):
            raise OffsetsError("an 'offset' is an object or null")
        out.append((entry["partition"], offset))
    return out


def alter_offsets(store, offsets: storage.OffsetStore, name: str, kind: str, body: Any,  # noqa: ANN001
                  connector: Any = None) -> None:
    """PATCH: a source's offsets in connect-offsets, a sink's in its group (and, first, those the sink
    `connector` (a Validated) keeps itself, through its alter_offsets, as Kafka calls alterOffsets first)."""
    entries = _entries(body)
    if kind == "source":
        offsets.reload()
        stored = {json.dumps(p, sort_keys=True): key for key, p in offsets.keys_of(name).items()}
        offsets.put(name, {stored.get(json.dumps(p, sort_keys=True)) or storage.partition_key(name, p): o
                           for p, o in entries})
        return
    from klog.client.groups_admin import ResetRow

    plan, drop = [], []
    for partition, offset in entries:
        topic, number = partition.get("kafka_topic"), partition.get("kafka_partition")
        if not isinstance(topic, str) or not isinstance(number, int) or isinstance(number, bool) or number < 0:
            raise OffsetsError("a sink connector's partition is {\"kafka_topic\": TOPIC, \"kafka_partition\": N}")
        if offset is None:
            drop.append(f"{topic}:{number}")
            continue
        value = offset.get("kafka_offset")
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise OffsetsError("a sink connector's offset is {\"kafka_offset\": N} with N 0 or more")
        plan.append(ResetRow(topic, number, None, 0, value, value))
    if connector is not None:
        altered: dict = {(row.topic, row.partition): row.new_offset for row in plan}
        for scope in drop:
            topic, _, number = scope.rpartition(":")
            altered[(topic, int(number))] = None
        connector.cls().alter_offsets(connector.props, altered)
    if plan:
        store.reset_group_offsets(sink_group(name), plan)
    for scope in drop:
        try:
            store.delete_group_offsets(sink_group(name), scope)
        except KlogError:
            pass  # nothing committed there: nothing to remove


def reset_offsets(store, offsets: storage.OffsetStore, name: str, kind: str,  # noqa: ANN001
                  connector: Any = None) -> None:
    """DELETE: a source's offsets in connect-offsets, a sink's group's (and those the sink `connector`, a
    Validated, keeps itself)."""
    if kind == "source":
        offsets.reload()
        keys = list(offsets.keys_of(name))
        if keys:
            offsets.put(name, dict.fromkeys(keys))
        return
    if connector is not None:
        connector.cls().alter_offsets(connector.props, None)
    try:
        store.delete_group(sink_group(name))
    except KlogError:
        pass  # no group: nothing committed
