"""A hostile review of `klog serve`'s authorization against Kafka 3.9's KafkaApis/ControllerApis: each
test is a case where klog answered otherwise than Kafka does, or one where leaking was likely.

The server listens on PLAINTEXT, so every client is User:ANONYMOUS; each test gives ANONYMOUS the
bindings its case needs (a binding for User:nobody keeps the table non-empty, so
allow.everyone.if.no.acl.found is off). Real clients (confluent-kafka) where they expose the API,
kio-encoded requests where the field at stake is one clients hide.
"""

from __future__ import annotations

import datetime
import gc
import uuid

import pytest
from kio.static.constants import EntityType
from kio.static.primitive import i32Timedelta

import klog
from klog.meta.acls import AclsMeta
from klog.protocol.kafka import E
from klog.protocol.schemas import payload_module
from klog.security.acl import AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType
from klog.server import Server
from tests.serve_helpers import RawClient, txn_batch

T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
ANON = "User:ANONYMOUS"
TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=5))


def allow(rtype: ResourceType, name: str, op: Operation, pattern: PatternType = PatternType.LITERAL) -> AclBinding:
    return AclBinding(rtype, name, pattern, ANON, "*", op, Permission.ALLOW)


def deny(rtype: ResourceType, name: str, op: Operation, pattern: PatternType = PatternType.LITERAL) -> AclBinding:
    return AclBinding(rtype, name, pattern, ANON, "*", op, Permission.DENY)


@pytest.fixture
def server(data_dir):
    store = klog.open(data_dir)
    acls = AclsMeta(store.meta)
    acls.add([AclBinding(T, "unrelated", PatternType.LITERAL, "User:nobody", "*", Operation.READ, Permission.ALLOW)])
    store.create_topic("secret", partitions=1)
    with Server(store=store, listen=("127.0.0.1", 0), idle_ms=30_000) as srv:
        srv.acls = acls
        srv.bootstrap = f"127.0.0.1:{srv.port}"
        yield srv
        gc.collect()  # librdkafka clients gone before the server
    store.close()


def grant(server, *bindings: AclBinding) -> None:
    """ANONYMOUS's bindings are exactly `bindings` (applied at once)."""
    server.acls.remove(AclFilter(principal=ANON))
    if bindings:
        server.acls.add(list(bindings))
    server.security.authorizer.invalidate()


# -- InitProducerId of an idempotent producer: Kafka's authorizeByResourceType (KIP-679) ----------------
def _init_producer_id(port: int) -> int:
    with RawClient(port) as c:
        r = c.send(22, 4, transactional_id=None, transaction_timeout=TIMEOUT, producer_id=-1, producer_epoch=-1)
    return r.error_code


@pytest.mark.parametrize(("bindings", "allowed"), [
    # a wildcard DENY refuses whatever else allows (Kafka returns DENIED at once)
    ([allow(T, "orders", Operation.WRITE), deny(T, "*", Operation.WRITE)], False),
    ([allow(T, "orders", Operation.ALL), deny(T, "*", Operation.ALL)], False),
    # an ALLOW dominated by a DENY of a prefix of it, or of the same literal name
    ([allow(T, "orders-eu", Operation.WRITE), deny(T, "orders-", Operation.WRITE, PatternType.PREFIXED)], False),
    ([allow(T, "orders-", Operation.WRITE, PatternType.PREFIXED),
      deny(T, "ord", Operation.WRITE, PatternType.PREFIXED)], False),
    ([allow(T, "orders", Operation.WRITE), deny(T, "orders", Operation.WRITE)], False),
    # not dominated: a literal DENY does not cover a prefixed ALLOW, nor a longer prefix a shorter one
    ([allow(T, "orders-", Operation.WRITE, PatternType.PREFIXED), deny(T, "orders-eu", Operation.WRITE)], True),
    ([allow(T, "orders-", Operation.WRITE, PatternType.PREFIXED),
      deny(T, "orders-eu", Operation.WRITE, PatternType.PREFIXED)], True),
    ([allow(T, "orders", Operation.WRITE), deny(T, "other", Operation.WRITE)], True),
    ([allow(T, "*", Operation.WRITE), deny(T, "orders", Operation.WRITE)], True),
    # Read is not Write; IdempotentWrite on the cluster is enough alone
    ([allow(T, "orders", Operation.READ)], False),
    ([allow(C, "kafka-cluster", Operation.IDEMPOTENT_WRITE), deny(T, "*", Operation.WRITE)], True),
])
def test_idempotent_init_producer_id_decides_as_kafkas_authorize_by_resource_type(server, bindings, allowed):
    grant(server, *bindings)
    expected = E.none if allowed else E.cluster_authorization_failed
    assert _init_producer_id(server.port) == expected


def test_an_idempotent_producer_under_a_wildcard_deny_fails_with_kafkas_error(server):
    """confluent-kafka's idempotent producer (InitProducerId first): refused, its fatal error
    names the cluster authorization, as with Kafka; nothing is written."""
    ck = pytest.importorskip("confluent_kafka")
    grant(server, allow(T, "secret", Operation.WRITE), allow(T, "secret", Operation.DESCRIBE),
          deny(T, "*", Operation.WRITE))
    p = ck.Producer({"bootstrap.servers": server.bootstrap, "enable.idempotence": True, "message.timeout.ms": 5000,
                     "log_level": 0})
    p.produce("secret", b"x")
    import time

    fatal = None
    deadline = time.monotonic() + 10
    while fatal is None and time.monotonic() < deadline:
        try:
            p.poll(0.2)
        except ck.KafkaException as e:  # librdkafka raises its fatal error from poll
            fatal = e.args[0]
    assert fatal is not None and fatal.fatal() and fatal.code() == ck.KafkaError.CLUSTER_AUTHORIZATION_FAILED, fatal
    assert server.store.partition("secret", 0).high_watermark() == 0


# -- Metadata: auto-creation refused is TOPIC_AUTHORIZATION_FAILED ----------------------------------------
def _metadata(port: int, name: str, auto: bool) -> int:
    mod = payload_module(3, 12, EntityType.request)
    with RawClient(port) as c:
        r = c.send(3, 12, topics=(mod.MetadataRequestTopic(topic_id=None, name=name),), allow_auto_topic_creation=auto,
                   include_topic_authorized_operations=False)
    [topic] = r.topics
    return topic.error_code


def test_metadata_of_a_topic_it_may_describe_but_not_create_is_topic_authorization_failed(server):
    """Kafka's unauthorizedForCreateTopics: with auto-creation on, a topic the caller may Describe
    but not Create is TOPIC_AUTHORIZATION_FAILED (a producer fails at once; UNKNOWN_TOPIC_OR_PARTITION
    had it retry until its message timeout), and nothing is created."""
    grant(server, allow(T, "*", Operation.DESCRIBE))
    assert _metadata(server.port, "newtopic", auto=True) == E.topic_authorization_failed
    assert _metadata(server.port, "newtopic", auto=False) == E.unknown_topic_or_partition
    assert not server.store.has_topic("newtopic")
    grant(server, allow(T, "*", Operation.DESCRIBE), allow(T, "new", Operation.CREATE, PatternType.PREFIXED))
    assert _metadata(server.port, "newtopic", auto=True) == E.none
    assert server.store.has_topic("newtopic")


def test_a_producer_to_a_topic_it_may_not_create_fails_fast(server):
    ck = pytest.importorskip("confluent_kafka")
    grant(server, allow(T, "*", Operation.WRITE))  # (Write implies Describe; no Create)
    p = ck.Producer({"bootstrap.servers": server.bootstrap, "message.timeout.ms": 20000, "log_level": 0})
    outcome: list = []
    p.produce("not-there", b"x", on_delivery=lambda err, msg: outcome.append(err))
    import time

    started = time.monotonic()
    p.flush(15)
    assert outcome and outcome[0] is not None and outcome[0].code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, \
        outcome
    assert time.monotonic() - started < 10  # not the 20 s message timeout
    assert not server.store.has_topic("not-there")


# -- DeleteTopics: no name for a topic id the caller may not Describe ------------------------------------
def _delete(port: int, name: str | None, topic_id: uuid.UUID | None) -> tuple[int, str | None]:
    mod = payload_module(20, 6, EntityType.request)
    with RawClient(port) as c:
        r = c.send(20, 6, topics=(mod.DeleteTopicState(name=name, topic_id=topic_id),), timeout=TIMEOUT)
    [result] = r.responses
    return result.error_code, result.name


def test_delete_topics_by_id_keeps_the_name_from_a_caller_that_may_not_describe_it(server):
    """Kafka's ControllerApis.deleteTopics: a topic named by id that the caller may not delete is
    TOPIC_AUTHORIZATION_FAILED, with its name only if the caller may Describe it."""
    topic_id = uuid.UUID(server.store.topics.get("secret").topic_id)
    grant(server, allow(T, "other", Operation.DESCRIBE))
    assert _delete(server.port, None, topic_id) == (E.topic_authorization_failed, None)
    grant(server, allow(T, "secret", Operation.DESCRIBE))
    assert _delete(server.port, None, topic_id) == (E.topic_authorization_failed, "secret")
    assert server.store.has_topic("secret")
    assert _delete(server.port, None, uuid.uuid4())[0] == E.unknown_topic_id


def test_delete_topics_by_name_unknown_only_to_who_may_describe_it(server):
    grant(server, allow(T, "*", Operation.DESCRIBE))
    assert _delete(server.port, "not-there", None) == (E.unknown_topic_or_partition, "not-there")
    assert _delete(server.port, "secret", None) == (E.topic_authorization_failed, "secret")
    grant(server, allow(T, "other", Operation.DESCRIBE))
    assert _delete(server.port, "not-there", None) == (E.topic_authorization_failed, "not-there")
    assert server.store.has_topic("secret")


# -- CreateTopics: the new topic's configs only to who may DescribeConfigs it ------------------------------
def _create(port: int, name: str) -> object:
    mod = payload_module(19, 7, EntityType.request)
    with RawClient(port) as c:
        r = c.send(19, 7, topics=(mod.CreatableTopic(name=name, num_partitions=2, replication_factor=-1, assignments=(),
                                                     configs=(mod.CreatableTopicConfig(name="retention.ms",
                                                                                       value="1000"),)),),
                   timeout=TIMEOUT, validate_only=False)
    [result] = r.topics
    return result


def test_create_topics_answers_configs_only_with_describe_configs(server):
    """Kafka's controller (ReplicationControlManager.createTopic): without DescribeConfigs on the new
    topic its answer has no configs, partitions nor replication factor, and TOPIC_AUTHORIZATION_FAILED
    in topic_config_error_code; the topic is created all the same."""
    grant(server, allow(C, "kafka-cluster", Operation.CREATE))
    r = _create(server.port, "made")
    assert (r.error_code, r.topic_config_error_code, r.configs, r.num_partitions, r.replication_factor) == (
        E.none, E.topic_authorization_failed, (), -1, -1)
    assert r.topic_id == uuid.UUID(server.store.topics.get("made").topic_id)
    assert len(server.store.topics.get("made").partitions) == 2
    grant(server, allow(C, "kafka-cluster", Operation.CREATE), allow(T, "made2", Operation.DESCRIBE_CONFIGS))
    r = _create(server.port, "made2")
    assert (r.error_code, r.topic_config_error_code, r.num_partitions) == (E.none, E.none, 2)
    assert ("retention.ms", "1000") in {(c.name, c.value) for c in r.configs}


def test_create_topics_without_describe_configs_through_admin_client(server):
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka import admin

    grant(server, allow(T, "made", Operation.CREATE))
    a = admin.AdminClient({"bootstrap.servers": server.bootstrap, "log_level": 0})
    futures = a.create_topics([admin.NewTopic("made", 3)], operation_timeout=5)
    assert futures["made"].result(timeout=10) is None
    assert len(server.store.topics.get("made").partitions) == 3
    futures = a.create_topics([admin.NewTopic("forbidden", 1)], operation_timeout=5)
    with pytest.raises(ck.KafkaException) as e:
        futures["forbidden"].result(timeout=10)
    assert e.value.args[0].code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED


# -- DescribeConfigs, AlterConfigs, IncrementalAlterConfigs: each resource type's own check --------------
BROKER, BROKER_LOGGER, GROUP_RESOURCE = 4, 8, 32


def _describe_configs(port: int, rtype: int, name: str) -> int:
    mod = payload_module(32, 4, EntityType.request)
    with RawClient(port) as c:
        r = c.send(32, 4, resources=(mod.DescribeConfigsResource(resource_type=rtype, resource_name=name,
                                                                 configuration_keys=None),),
                   include_synonyms=False, include_documentation=False)
    [result] = r.results
    return result.error_code


def _alter_configs(port: int, rtype: int, name: str, incremental: bool) -> int:
    key = 44 if incremental else 33
    version = 1 if incremental else 2
    mod = payload_module(key, version, EntityType.request)
    config = (mod.AlterableConfig(name="retention.ms", config_operation=0, value="1000") if incremental
              else mod.AlterableConfig(name="retention.ms", value="1000"))
    with RawClient(port) as c:
        r = c.send(key, version, resources=(mod.AlterConfigsResource(resource_type=rtype, resource_name=name,
                                                                     configs=(config,)),), validate_only=True)
    [result] = r.responses
    return result.error_code


@pytest.mark.parametrize("incremental", [False, True])
def test_alter_configs_of_a_broker_or_group_checks_the_cluster_or_the_group_first(server, incremental):
    """Kafka's ControllerApis.authorizeAlterResource: AlterConfigs on the cluster for a broker
    (CLUSTER_AUTHORIZATION_FAILED), on the group for a group (GROUP_AUTHORIZATION_FAILED), before
    anything else is said of the resource (klog answered INVALID_REQUEST to anyone)."""
    grant(server, allow(T, "secret", Operation.ALTER_CONFIGS))
    assert _alter_configs(server.port, BROKER, "0", incremental) == E.cluster_authorization_failed
    assert _alter_configs(server.port, GROUP_RESOURCE, "g", incremental) == E.group_authorization_failed
    assert _alter_configs(server.port, 2, "secret", incremental) == E.none
    assert _alter_configs(server.port, 2, "other", incremental) == E.topic_authorization_failed
    grant(server, allow(C, "kafka-cluster", Operation.ALTER_CONFIGS), allow(G, "g", Operation.ALL))  # (klog's ACLs
    # name no config operation on a group)
    # allowed: klog alters no broker or group configs (the store's defaults: `klog dirs`)
    assert _alter_configs(server.port, BROKER, "0", incremental) == E.invalid_request
    assert _alter_configs(server.port, GROUP_RESOURCE, "g", incremental) == E.invalid_request


def test_describe_configs_of_a_group_checks_the_group(server):
    grant(server, allow(C, "kafka-cluster", Operation.DESCRIBE_CONFIGS))
    assert _describe_configs(server.port, GROUP_RESOURCE, "g") == E.group_authorization_failed
    assert _describe_configs(server.port, BROKER_LOGGER, "0") == E.invalid_request  # allowed, not served
    grant(server, allow(G, "g", Operation.ALL))
    assert _describe_configs(server.port, BROKER, "0") == E.cluster_authorization_failed
    assert _describe_configs(server.port, BROKER_LOGGER, "0") == E.cluster_authorization_failed
    assert _describe_configs(server.port, GROUP_RESOURCE, "g") == E.invalid_request  # allowed, not served


# -- transactions.py and produce.py (not this review's to change): the lead applies the patches in
#    /work/wt/aclreview-findings.md --------------------------------------------------------------------
def test_write_txn_markers_takes_alter_on_the_cluster_as_kafka(server):
    """KafkaApis.handleWriteTxnMarkersRequest: Alter on the cluster, else ClusterAction."""
    mod = payload_module(27, 1, EntityType.request)
    marker = mod.WritableTxnMarker(producer_id=1, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
                                   topics=(mod.WritableTxnMarkerTopic(name="secret", partition_indexes=(0,)),))
    grant(server, allow(T, "secret", Operation.ALL))
    with RawClient(server.port) as c:
        [result] = c.send(27, 1, markers=(marker,)).markers
        assert result.topics[0].partitions[0].error_code == E.cluster_authorization_failed
    grant(server, allow(C, "kafka-cluster", Operation.ALTER))
    with RawClient(server.port) as c:
        [result] = c.send(27, 1, markers=(marker,)).markers
    assert result.topics[0].partitions[0].error_code == E.none  # (no transaction open there: nothing written)


def test_transactional_records_without_a_transactional_id_are_refused_as_kafka(server):
    """KafkaApis.handleProduceRequest: transactional records need a transactional id the caller may
    Write, else the whole request is TRANSACTIONAL_ID_AUTHORIZATION_FAILED (before any topic check)."""
    from tests.serve_helpers import produce_request_fields

    grant(server, allow(T, "secret", Operation.WRITE))
    with RawClient(server.port) as c:
        r = c.send(0, 9, **produce_request_fields(9, "secret", 0, txn_batch([b"x"], 7, 0, 0)))
    assert r.responses[0].partition_responses[0].error_code == E.transactional_id_authorization_failed
    assert server.store.partition("secret", 0).high_watermark() == 0


def test_describe_producers_of_an_invalid_topic_name_is_invalid_topic_as_kafka(server):
    """KafkaApis.handleDescribeProducersRequest: checkValidTopic first (INVALID_TOPIC_EXCEPTION, before
    the ACLs); a storage error would have the admin client retry it until its timeout."""
    mod = payload_module(61, 0, EntityType.request)
    grant(server, allow(T, "*", Operation.READ))
    with RawClient(server.port) as c:
        r = c.send(61, 0, topics=(mod.TopicRequest(name="bad name!", partition_indexes=(0,)),
                                  mod.TopicRequest(name="x" * 300, partition_indexes=(0,))))
    assert [t.partitions[0].error_code for t in r.topics] == [E.invalid_topic_exception] * 2


# -- no client touches another principal's transactional producer -----------------------------------------
def _init_txn(c: RawClient, tid: str) -> tuple[int, int, int]:
    r = c.send(22, 4, transactional_id=tid, transaction_timeout=TIMEOUT, producer_id=-1, producer_epoch=-1)
    return r.error_code, int(r.producer_id), int(r.producer_epoch)


def _add_partition(c: RawClient, tid: str, pid: int, epoch: int) -> int:
    mod = payload_module(24, 3, EntityType.request)
    r = c.send(24, 3, v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
               v3_and_below_producer_epoch=epoch,
               v3_and_below_topics=(mod.AddPartitionsToTxnTopic(name="secret", partitions=(0,)),))
    return r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code


def _end_txn(c: RawClient, tid: str, pid: int, epoch: int, commit: bool) -> int:
    return c.send(26, 3, transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit).error_code


def _txn_produce(c: RawClient, tid: str | None, records: bytes) -> int:
    from tests.serve_helpers import produce_request_fields

    fields = produce_request_fields(9, "secret", 0, records)
    fields["transactional_id"] = tid
    return c.send(0, 9, **fields).responses[0].partition_responses[0].error_code


def _txn_offset_commit(c: RawClient, tid: str, pid: int, epoch: int) -> int:
    mod = payload_module(28, 3, EntityType.request)
    r = c.send(28, 3, transactional_id=tid, group_id="g", producer_id=pid, producer_epoch=epoch, generation_id=-1,
               member_id="", group_instance_id=None, topics=(mod.TxnOffsetCommitRequestTopic(
                   name="secret", partitions=(mod.TxnOffsetCommitRequestPartition(
                       partition_index=0, committed_offset=0, committed_leader_epoch=-1, committed_metadata=""),)),))
    return r.topics[0].partitions[0].error_code


def test_a_principal_cannot_touch_a_transaction_of_an_id_it_may_not_write(server):
    """Alice's transaction (id 'a') is open. Mallory may Write id 'm', the topic and read the group:
    nothing she sends under 'a', nor under 'm' with alice's producer id and epoch (all visible in
    DescribeProducers and in every fetched batch), nor without any id, touches it; alice commits it."""
    from klog.broker.offsets import last_stable_offset

    writer = [allow(T, "secret", Operation.WRITE), allow(T, "secret", Operation.READ), allow(G, "g", Operation.READ)]
    grant(server, allow(X, "a", Operation.WRITE), *writer)
    with RawClient(server.port) as c:
        error, pid, epoch = _init_txn(c, "a")
        assert error == E.none
        assert _add_partition(c, "a", pid, epoch) == E.none
        assert _txn_produce(c, "a", txn_batch([b"alice"], pid, epoch, 0)) == E.none
    part = server.store.partition("secret", 0)
    assert (part.high_watermark(), last_stable_offset(part)) == (1, 0)

    grant(server, allow(X, "m", Operation.WRITE), *writer)
    with RawClient(server.port) as c:
        assert _init_txn(c, "a")[0] == E.transactional_id_authorization_failed  # (would fence alice)
        assert _end_txn(c, "a", pid, epoch, False) == E.transactional_id_authorization_failed
        assert _add_partition(c, "a", pid, epoch) == E.transactional_id_authorization_failed
        assert _txn_offset_commit(c, "a", pid, epoch) == E.transactional_id_authorization_failed
        assert _txn_produce(c, "a", txn_batch([b"mallory"], pid, epoch, 1)) == \
            E.transactional_id_authorization_failed
        assert _init_txn(c, "m")[0] == E.none
        # her own id with alice's producer: the coordinator's mapping refuses it
        assert _end_txn(c, "m", pid, epoch, False) == E.invalid_producer_id_mapping
        assert _add_partition(c, "m", pid, epoch) == E.invalid_producer_id_mapping
        assert _txn_offset_commit(c, "m", pid, epoch) == E.invalid_producer_id_mapping
        assert _txn_produce(c, "m", txn_batch([b"mallory"], pid, epoch, 1)) != E.none
        # no id: neither a transactional batch nor a plain one under alice's producer id
        assert _txn_produce(c, None, txn_batch([b"mallory"], pid, epoch, 1)) != E.none
        from tests.serve_helpers import batch

        assert _txn_produce(c, None, batch([b"mallory"], producer_id=pid, epoch=epoch, sequence=1)) != E.none
    assert (part.high_watermark(), last_stable_offset(part)) == (1, 0)  # alice's transaction, untouched

    grant(server, allow(X, "a", Operation.WRITE), *writer)
    with RawClient(server.port) as c:
        assert _end_txn(c, "a", pid, epoch, True) == E.none
    assert last_stable_offset(part) == 2  # her record and its COMMIT marker


# -- nothing of a topic, group or transactional id the caller may not Describe in any listing -------------
def test_no_listing_names_what_the_caller_may_not_describe(server):
    """ANONYMOUS may Describe topic 'visible', group 'g' and transactional id 'a' only. 'secret' (a
    topic with offsets committed in 'g' and a partition in transaction 'a'), group 'hidden' and
    transactional id 'b' appear in no answer that lists: Metadata and DescribeTopicPartitions of all
    topics, OffsetFetch of all the group's topics (v7, v8), ListGroups, DescribeTransactions,
    ListTransactions, DescribeLogDirs."""
    from klog.meta.groups import GroupsMeta

    store = server.store
    store.create_topic("visible", partitions=1)
    GroupsMeta(store.meta).store_offsets("g", {("secret", 0): (5, "s"), ("visible", 0): (3, "v")})
    GroupsMeta(store.meta).store_offsets("hidden", {("visible", 0): (1, "")})
    everything = [allow(T, "*", Operation.ALL), allow(X, "*", Operation.ALL), allow(G, "*", Operation.ALL)]
    grant(server, *everything)
    with RawClient(server.port) as c:
        for tid in ("a", "b"):
            error, pid, epoch = _init_txn(c, tid)
            mod = payload_module(24, 3, EntityType.request)
            r = c.send(24, 3, v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                       v3_and_below_producer_epoch=epoch, v3_and_below_topics=(
                           mod.AddPartitionsToTxnTopic(name="secret", partitions=(0,)),
                           mod.AddPartitionsToTxnTopic(name="visible", partitions=(0,))))
            assert {p.partition_error_code for t in r.results_by_topic_v3_and_below
                    for p in t.results_by_partition} == {E.none}
    grant(server, allow(T, "visible", Operation.DESCRIBE), allow(G, "g", Operation.DESCRIBE),
          allow(X, "a", Operation.DESCRIBE))
    answers = {}
    with RawClient(server.port) as c:
        answers["Metadata"] = c.send(3, 12, topics=None, allow_auto_topic_creation=False,
                                     include_topic_authorized_operations=True)
        answers["DescribeTopicPartitions"] = c.send(75, 0, topics=(), response_partition_limit=100, cursor=None)
        answers["OffsetFetch v7"] = c.send(9, 7, group_id="g", topics=None, require_stable=False)
        f8 = payload_module(9, 8, EntityType.request)
        answers["OffsetFetch v8"] = c.send(9, 8, groups=(f8.OffsetFetchRequestGroup(group_id="g", topics=None),),
                                           require_stable=False)
        answers["ListGroups"] = c.send(16, 4, states_filter=())
        answers["DescribeTransactions"] = c.send(65, 0, transactional_ids=("a",))
        answers["ListTransactions"] = c.send(66, 1, state_filters=(), producer_id_filters=(), duration_filter=-1)
        answers["DescribeLogDirs"] = c.send(35, 4, topics=None)
    for api, answer in answers.items():
        text = repr(answer)
        for name in ("secret", "hidden", "'b'"):
            assert name not in text, f"{api} names {name}: {text[:600]}"
    assert "visible" in repr(answers["Metadata"]) and "visible" in repr(answers["DescribeTopicPartitions"])
    assert "visible" in repr(answers["OffsetFetch v7"]) and "visible" in repr(answers["OffsetFetch v8"])
    assert "'g'" in repr(answers["ListGroups"]) and "'a'" in repr(answers["ListTransactions"])
    assert "visible" in repr(answers["DescribeTransactions"])
    assert answers["DescribeLogDirs"].error_code == E.cluster_authorization_failed


def test_admin_client_altering_broker_configs_without_the_cluster_gets_cluster_authorization_failed(server):
    """confluent-kafka's incremental_alter_configs of a broker: refused for the cluster's ACL, as
    Kafka answers (klog said INVALID_REQUEST, as if the caller could have altered it)."""
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka import admin

    grant(server, allow(T, "*", Operation.ALL))
    a = admin.AdminClient({"bootstrap.servers": server.bootstrap, "log_level": 0})
    resource = admin.ConfigResource(admin.ResourceType.BROKER, "0", incremental_configs=[
        admin.ConfigEntry("log.retention.ms", "1000", incremental_operation=admin.AlterConfigOpType.SET)])
    futures = a.incremental_alter_configs([resource], validate_only=True)
    with pytest.raises(ck.KafkaException) as e:
        next(iter(futures.values())).result(timeout=10)
    assert e.value.args[0].code() == ck.KafkaError.CLUSTER_AUTHORIZATION_FAILED
