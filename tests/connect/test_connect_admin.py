"""A connector's admin client as Kafka's Worker.adminConfigs makes it: the worker's admin.* then the
connector's admin.override.* (where it uses an admin: a sink's DLQ, a source's topic.creation.*), used to
create and describe its topics on a cluster. klog checked admin.override.* against the override policy and
applied it nowhere. On klog's own store no admin setting has a meaning: they are named once in a warning."""

from __future__ import annotations

import gc

import pytest

import klog
from klog.connect.api import SinkConnector, SinkTask
from tests.connect.helpers import running, wait_for


class IdleSinkTask(SinkTask):
    def put(self, records: list) -> None:
        pass


class IdleSink(SinkConnector):
    task_class = IdleSinkTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [{} for _ in range(max_tasks)]


def _sink(**extra) -> dict:
    return {"name": "idle", "connector.class": f"{__name__}.IdleSink", "topics": "in",
            "errors.deadletterqueue.topic.name": "dlq", "errors.deadletterqueue.topic.replication.factor": "1",
            **extra}


def test_admin_settings_on_klogs_own_store_are_named_once_as_ignored(data_dir):
    warnings: list[str] = []
    config = _sink(**{"tasks.max": "2", "admin.override.request.timeout.ms": "5000"})
    with running(data_dir, config, worker={"admin.client.id": "mine"}, warnings=warnings) as w:
        wait_for(lambda: [r.state for r in w.runners()] == ["RUNNING", "RUNNING"], what="both tasks")
    ignored = [m for m in warnings if "no admin client" in m]
    assert ignored == ["connector 'idle': klog's own store has no admin client; these settings have no meaning "
                       "there and are ignored: admin.client.id, admin.override.request.timeout.ms"]


def test_the_principal_policy_lets_a_connector_name_its_principal_as_librdkafka_takes_it(data_dir):
    """Kafka's Principal policy allows the SASL settings naming a principal (sasl.jaas.config for Java's
    clients); klog's cluster clients are librdkafka's, which take sasl.username and sasl.password."""
    from klog.connect.errors import ConfigError
    from klog.connect.worker import WORKER, validate

    worker = WORKER.parse({"connector.client.config.override.policy": "Principal"})
    validate(_sink(**{"admin.override.sasl.username": "admin", "admin.override.sasl.password": "pw",
                      "admin.override.security.protocol": "SASL_SSL"}), worker)
    with pytest.raises(ConfigError, match="admin.override.client.id.*policy does not allow"):
        validate(_sink(**{"admin.override.client.id": "x"}), worker)


@pytest.fixture
def sasl_cluster(data_dir):
    """`klog serve` over SASL_PLAINTEXT: 'worker' may read, write and describe every topic and group but
    not create a topic; 'admin' may create and describe topics."""
    from klog.meta.acls import AclsMeta
    from klog.meta.credentials import CredentialsMeta
    from klog.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
    from klog.server import Server
    from klog.server.listeners import Listener, SecurityConfig

    def allow(rtype, op, principal):
        return AclBinding(rtype, "*" if rtype != ResourceType.CLUSTER else "kafka-cluster", PatternType.LITERAL,
                          f"User:{principal}", "*", op, Permission.ALLOW)

    store = klog.open(data_dir)
    credentials = CredentialsMeta(store.meta)
    for user in ("worker", "admin"):
        credentials.add(user, "SCRAM-SHA-256", "pw")
    T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
    AclsMeta(store.meta).add([allow(T, op, "worker") for op in (Operation.READ, Operation.WRITE, Operation.DESCRIBE,
                                                                Operation.DESCRIBE_CONFIGS)]
                             + [allow(G, Operation.READ, "worker"), allow(G, Operation.DESCRIBE, "worker"),
                                allow(C, Operation.IDEMPOTENT_WRITE, "worker"),
                                allow(T, Operation.CREATE, "admin"), allow(T, Operation.DESCRIBE, "admin")])
    for topic in ("in", "connect-offsets", "connect-configs", "connect-status"):  # what the worker may not create
        store.create_topic(topic, partitions=1, configs={} if topic == "in" else {"cleanup.policy": "compact"})
    security = SecurityConfig([Listener("SASL_PLAINTEXT", "127.0.0.1", 0)], auth_failure_delay_ms=100)
    with Server(store=store, security=security, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        server.bootstrap = f"127.0.0.1:{server.port}"
        yield server
        gc.collect()  # librdkafka clients gone before the server
    store.close()


def _sasl(user: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user,
            "sasl.password": "pw", "log_level": "0"}


@pytest.mark.slow
def test_a_sinks_dlq_and_a_sources_topics_are_created_by_the_admin_its_overrides_make(tmp_path, sasl_cluster):
    """Against a cluster where the worker's principal may not create topics, admin.override.sasl.* (the
    override policy's Principal case) lets the DLQ and a source's topic be created; klog created them as the
    worker's principal (refused: the sink's task failed)."""
    from klog.client.remote.store import RemoteStore
    from klog.client.remote.target import ClusterTarget
    from klog.connect.worker import Worker

    as_admin = {"admin.override.sasl.username": "admin"}
    lines = tmp_path / "lines.txt"
    lines.write_text("a\n")
    source = {"name": "fs", "connector.class": "FileStreamSource", "file": str(lines), "topic": "lines",
              "value.converter": "string", "topic.creation.default.partitions": "1",
              "topic.creation.default.replication.factor": "1", **as_admin}
    store = RemoteStore(ClusterTarget(sasl_cluster.bootstrap, _sasl("worker")))
    worker = Worker(store, {"offset.flush.interval.ms": "200", "connector.client.config.override.policy": "Principal"})
    try:
        for config in (_sink(**as_admin), source):
            worker.start(worker.validate(config))
        wait_for(lambda: worker.failures or {"dlq", "lines"} <= set(store.topic_names()), timeout=20,
                 what="the DLQ and the source's topic")
        assert not worker.failures
        assert {r.state for r in worker.runners()} == {"RUNNING"}
    finally:
        worker.stop()
        store.close()


@pytest.mark.parametrize("setting", ["sasl.kerberos.kinit.cmd", "sasl.kerberos.principal", "plugin.library.paths",
                                     "ssl.providers"])
def test_a_connector_may_not_make_the_admin_client_run_a_program_or_load_a_library(setting):
    """admin.override.* goes to librdkafka as it is: its kinit command runs in a shell (the default one
    with the principal in it), its plugins (dlopen) and OpenSSL providers are loaded into the worker's
    process. Anyone who may create a connector (the REST API, the config topic) could run code on the worker
    that way, under the default All policy; refused naming the key. The worker's own admin.* (its
    operator's) may set them."""
    from klog.connect.errors import ConfigError
    from klog.connect.worker import WORKER, validate

    worker = WORKER.parse({})
    with pytest.raises(ConfigError, match=f"admin.override.{setting}.*may not set it"):
        validate(_sink(**{f"admin.override.{setting}": "touch /tmp/owned"}), worker)
    validate(_sink(), WORKER.parse({f"admin.{setting}": "/usr/bin/kinit"}))
