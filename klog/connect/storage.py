"""Connect's internal compacted topics, in Kafka Connect's formats, over klog's client API.

- connect-offsets: key `["<connector>",{<source partition>}]`, value `{<offset>}` (JSON, no schema).
- connect-configs: `connector-<name>` {"properties": {...}}, `task-<name>-<n>` {"properties": {...}},
  `commit-<name>` {"tasks": n}, `target-state-<name>` {"state": "STARTED", "state.v2": ...}.
- connect-status: `status-connector-<name>` / `status-task-<name>-<n>` {"state", "trace", "worker_id",
  "generation"}.
The store may be the local one or a cluster (RemoteStore): the same calls serve both.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from klog.errors import KlogError

OFFSETS_DEFAULT = "connect-offsets"
CONFIGS_DEFAULT = "connect-configs"
STATUS_DEFAULT = "connect-status"
PARTITIONS = {"offsets": 25, "configs": 1, "status": 5}  # Kafka Connect's defaults


def compact_json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def partition_key(connector: str, partition: dict) -> bytes:
    """An offset record's key: Kafka Connect's JsonConverter form of [connector, partition]."""
    return compact_json([connector, partition])


def ensure_topic(store, name: str, partitions: int, compacted: bool = True) -> None:  # noqa: ANN001
    if not store.has_topic(name):
        try:
            store.create_topic(name, partitions=partitions, configs={"cleanup.policy": "compact"} if compacted else {},
                               exist_ok=True)
        except KlogError:
            if not store.has_topic(name):  # another worker created it meanwhile: fine
                raise


def read_all(store, topic: str) -> list[tuple[bytes | None, bytes | None]]:  # noqa: ANN001
    """Every (key, value) of `topic` from its beginning to its end now, in offset order per partition."""
    from klog.errors import StateLostError

    for attempt in range(2):
        try:
            # read_committed: offsets a transactional source task wrote are there only once committed
            with store.consumer(topic, isolation_level="read_committed") as consumer:
                return [(r.key, r.value) for r in consumer]
        except StateLostError:
            # another worker was killed between its append and its state file: rebuilt from the log (the
            # local store only; a cluster's broker has no such gap)
            if attempt or not hasattr(store, "verify"):
                raise
            store.verify(topic, repair=True)
    return []


class KafkaTopicStore:
    """One internal topic: read once at start (latest value per key), then written through a producer
    that is flushed on each write (an acknowledged write is durable)."""

    def __init__(self, store, topic: str, partitions: int) -> None:  # noqa: ANN001
        self.store = store
        self.topic = topic
        ensure_topic(store, topic, partitions)
        self.data: dict[bytes, bytes | None] = {}
        for key, value in read_all(store, topic):
            if key is not None:
                self.data[key] = value
        self._producer = store.producer()
        self._lock = threading.Lock()

    def reload(self) -> None:
        """Read the topic again (what other workers wrote since)."""
        data: dict[bytes, bytes | None] = {}
        for key, value in read_all(self.store, self.topic):
            if key is not None:
                data[key] = value
        with self._lock:
            self.data = data

    def write(self, items: dict[bytes, bytes | None]) -> None:
        with self._lock:
            for key, value in items.items():
                self._producer.send(self.topic, value, key=key)
            self._producer.flush()
            self.data.update(items)

    def remember(self, items: dict[bytes, bytes | None]) -> None:
        """What another producer wrote to the topic (a transactional source task's offsets), known here."""
        with self._lock:
            self.data.update(items)

    def close(self) -> None:
        self._producer.close()


class OffsetStore(KafkaTopicStore):
    def __init__(self, store, topic: str = OFFSETS_DEFAULT) -> None:  # noqa: ANN001
        super().__init__(store, topic, PARTITIONS["offsets"])

    def get(self, connector: str, partition: dict) -> dict | None:
        raw = self.data.get(partition_key(connector, partition))
        return None if raw is None else json.loads(raw)

    def put(self, connector: str, offsets: dict[bytes, dict | None]) -> None:
        """`offsets`: partition key (partition_key()) → offset (None resets)."""
        self.write({k: None if v is None else compact_json(v) for k, v in offsets.items()})

    def keys_of(self, connector: str) -> dict[bytes, dict]:
        """The stored keys of `connector`'s partitions (as written: their JSON's key order is the
        writer's) → the partition."""
        out = {}
        for key, value in self.data.items():
            name, partition = json.loads(key)
            if name == connector and value is not None:
                out[key] = partition
        return out

    def of(self, connector: str) -> dict[str, dict]:
        """Every stored offset of `connector`: source partition (as JSON text) → offset."""
        out = {}
        for key, value in self.data.items():
            name, partition = json.loads(key)
            if name == connector and value is not None:
                out[json.dumps(partition, sort_keys=True)] = json.loads(value)
        return out


class ConfigStore(KafkaTopicStore):
    def __init__(self, store, topic: str = CONFIGS_DEFAULT) -> None:  # noqa: ANN001
        super().__init__(store, topic, PARTITIONS["configs"])

    def put_connector(self, name: str, props: dict[str, str], task_configs: list[dict[str, str]]) -> None:
        """The connector's config, its tasks' configs, then the commit record making them current."""
        items = {f"connector-{name}".encode(): compact_json({"properties": props})}
        for i, task in enumerate(task_configs):
            items[f"task-{name}-{i}".encode()] = compact_json({"properties": task})
        items[f"commit-{name}".encode()] = compact_json({"tasks": len(task_configs)})
        self.write(items)

    def put_target_state(self, name: str, state: str) -> None:
        """STARTED, PAUSED or STOPPED (Kafka 3.5+ writes the last as "state.v2")."""
        v1 = "PAUSED" if state == "STOPPED" else state
        self.write({f"target-state-{name}".encode(): compact_json({"state": v1, "state.v2": state})})

    def delete_connector(self, name: str) -> None:
        self.write({f"connector-{name}".encode(): None, f"target-state-{name}".encode(): None,
                    f"restart-connector-{name}".encode(): None})

    def put_restart(self, name: str, include_tasks: bool, only_failed: bool, task: int | None = None) -> None:
        """Kafka's restart request record (`restart-connector-<name>`); each worker restarts what it runs
        of the connector. klog adds a request id (the same request twice is two restarts) and, for one
        task's restart, its number."""
        import uuid

        doc = {"include-tasks": include_tasks, "only-failed": only_failed, "klog.request": uuid.uuid4().hex}
        if task is not None:
            doc["klog.task"] = task
        self.write({f"restart-connector-{name}".encode(): compact_json(doc)})

    def restart_requests(self) -> dict[str, dict]:
        """connector → its latest restart request."""
        out = {}
        for key, value in self.data.items():
            text = key.decode(errors="replace")
            if text.startswith("restart-connector-") and value is not None:
                out[text[len("restart-connector-"):]] = json.loads(value)
        return out

    def tasks(self, name: str) -> list[dict[str, str]]:
        """The task configs the last commit record of `name` made current."""
        commit = self.data.get(f"commit-{name}".encode())
        if commit is None:
            return []
        out = []
        for i in range(json.loads(commit)["tasks"]):
            raw = self.data.get(f"task-{name}-{i}".encode())
            if raw is None:
                return []  # a commit whose tasks were compacted away: not runnable until written again
            out.append(json.loads(raw)["properties"])
        return out

    def connectors(self) -> dict[str, dict[str, str]]:
        out = {}
        for key, value in self.data.items():
            text = key.decode(errors="replace")
            if text.startswith("connector-") and value is not None:
                out[text[len("connector-"):]] = json.loads(value)["properties"]
        return out

    def target_state(self, name: str) -> str:
        raw = self.data.get(f"target-state-{name}".encode())
        if raw is None:
            return "STARTED"
        doc = json.loads(raw)
        return doc.get("state.v2") or doc.get("state", "STARTED")


class StatusStore(KafkaTopicStore):
    def __init__(self, store, topic: str = STATUS_DEFAULT, worker_id: str = "klog") -> None:  # noqa: ANN001
        super().__init__(store, topic, PARTITIONS["status"])
        self.worker_id = worker_id

    def put(self, name: str, state: str, task: int | None = None, trace: str | None = None,
            generation: int = 0) -> None:
        key = f"status-connector-{name}" if task is None else f"status-task-{name}-{task}"
        self.write({key.encode(): compact_json({"state": state, "trace": trace, "worker_id": self.worker_id,
                                                "generation": generation})})

    def get(self, name: str, task: int | None = None) -> dict | None:
        """The latest status of the connector or one of its tasks, as this worker last read the topic."""
        key = f"status-connector-{name}" if task is None else f"status-task-{name}-{task}"
        raw = self.data.get(key.encode())
        return None if raw is None else json.loads(raw)
