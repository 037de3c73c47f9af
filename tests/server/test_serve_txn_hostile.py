"""A hostile review of transactions through `klog serve`: requests a well-behaved client never
sends, each of which once left a transaction that could never end.

Goal: whatever a transactional producer stages or asks, its transaction commits or aborts whole,
and neither its transactional id nor the consumer group's committed offsets are left stuck.
Method: raw kio requests against an in-process server (tests.serve_helpers.RawClient), the
coordinator's state read from the store.
"""

from __future__ import annotations

import pytest

from klog.protocol.kafka import E
from tests.serve_helpers import RawClient
from tests.server.test_serve_transactions import TxnCoordinatorState, _end, _init


def _add_offsets(client: RawClient, tid: str, pid: int, epoch: int, group: str) -> E:
    return client.send(25, 3, transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group).error_code


def _txn_offset_commit(client: RawClient, tid: str, pid: int, epoch: int, group: str, topic: str,
                       offset: int, metadata: str = "") -> E:
    from kio.schema.txn_offset_commit.v3 import request as toc

    resp = client.send(28, 3, transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch,
                       generation_id=-1, member_id="", group_instance_id=None, topics=(toc.TxnOffsetCommitRequestTopic(
                           name=topic, partitions=(toc.TxnOffsetCommitRequestPartition(
                               partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                               committed_metadata=metadata),)),))
    return resp.topics[0].partitions[0].error_code


def _offset_fetch(client: RawClient, group: str, topic: str, stable: bool) -> tuple[E, int]:
    from kio.schema.offset_fetch.v7 import request as of

    got = client.send(9, 7, group_id=group, require_stable=stable,
                      topics=(of.OffsetFetchRequestTopic(name=topic, partition_indexes=(0,)),))
    p = got.topics[0].partitions[0]
    return p.error_code, int(p.committed_offset)


def test_negative_offset_sent_in_a_transaction_commits_as_offset_commit_stores_it(kafka_server):
    """TxnOffsetCommit of a negative offset (Kafka stores one, as klog's OffsetCommit does): the
    commit completes. It was staged, then refused by the completing write: the transaction stayed
    PrepareCommit for good (the id answered CONCURRENT_TRANSACTIONS to every producer after, and
    OffsetFetch with require_stable UNSTABLE_OFFSET_COMMIT for the group's partition, forever)."""
    kafka_server.store.create_topic("neg")
    with RawClient(kafka_server.port) as c:
        r = _init(c, "neg-tx")
        pid, epoch = int(r.producer_id), int(r.producer_epoch)
        assert _add_offsets(c, "neg-tx", pid, epoch, "neg-g") == E.none
        assert _txn_offset_commit(c, "neg-tx", pid, epoch, "neg-g", "neg", -1) == E.none
        assert _end(c, "neg-tx", pid, epoch, True) == E.none
        assert TxnCoordinatorState.of(kafka_server.store, "neg-tx") == "CompleteCommit"
        assert _offset_fetch(c, "neg-g", "neg", stable=True) == (E.none, -1)
        assert _init(c, "neg-tx").error_code == E.none  # the id goes on


def test_txn_offset_commit_checks_group_id_and_metadata_as_offset_commit_does(kafka_server):
    """TxnOffsetCommit refuses what OffsetCommit refuses: a group id outside klog's rule (a '\\0'
    in it splits the offsets' LMDB keys: "g\\0t" wrote keys in group g's range) with
    INVALID_GROUP_ID, and metadata past offset.metadata.max.bytes (4,096) with
    OFFSET_METADATA_TOO_LARGE, as Kafka does; neither was checked, and both were committed."""
    from klog.meta.groups import GroupsMeta

    kafka_server.store.create_topic("gm")
    with RawClient(kafka_server.port) as c:
        r = _init(c, "gm-tx")
        pid, epoch = int(r.producer_id), int(r.producer_epoch)
        assert _add_offsets(c, "gm-tx", pid, epoch, "gm-g") == E.none
        assert _add_offsets(c, "gm-tx", pid, epoch, "gm-g\0gm") == E.invalid_group_id  # (refused there too)
        assert _txn_offset_commit(c, "gm-tx", pid, epoch, "gm-g\0gm", "gm", 7) == E.invalid_group_id
        assert _txn_offset_commit(c, "gm-tx", pid, epoch, "gm-g", "gm", 8, "m" * 4097) == E.offset_metadata_too_large
        assert _txn_offset_commit(c, "gm-tx", pid, epoch, "gm-g", "gm", 9, "m" * 4096) == E.none
        assert _end(c, "gm-tx", pid, epoch, True) == E.none
    groups = GroupsMeta(kafka_server.store.meta)
    committed = groups.committed("gm-g")
    assert {tp: (o.offset, len(o.metadata)) for tp, o in committed.items()} == {("gm", 0): (9, 4096)}


# -- compaction (the log cleaner) and transactions ---------------------------------------------------------
def _compacted_values(store, topic: str, level: str) -> dict[bytes, bytes]:  # noqa: ANN001
    latest = {}
    for record in store.consumer(topic, isolation_level=level):
        latest[record.key] = record.value
    return latest


def test_compaction_keeps_the_values_aborted_and_open_transactions_wrote_over(data_dir):
    """A compacted topic (a stream processor's changelog) where a transaction wrote a key and
    aborted, and another wrote a key and is still open while the cleaner runs: each key keeps its
    committed value for read_committed readers, as in Kafka (the cleaner leaves aborted batches
    out of its offset map and cleans nothing past the last stable offset). The cleaner ignored
    transactions: the aborted or later aborted value replaced the committed one, which read_committed
    readers then never saw again (a changelog restored without it)."""
    import klog
    from klog.broker import lifecycle

    with klog.open(data_dir) as store:
        store.create_topic("cl", 1, configs={"cleanup.policy": "compact", "segment.bytes": "200",
                                             "min.cleanable.dirty.ratio": "0.01"})
        with store.producer(transactional_id="cl-a") as first, store.producer(transactional_id="cl-b") as second, \
                store.producer() as plain:
            with first.transaction():
                first.send("cl", b"a1", key=b"a", partition=0)
                first.send("cl", b"b1", key=b"b", partition=0)
            first.begin()
            first.send("cl", b"a2-aborted", key=b"a", partition=0)
            first.flush()
            first.abort()
            second.begin()
            second.send("cl", b"b2-open", key=b"b", partition=0)
            second.flush()
            for i in range(6):  # later segments: the transactions' ones are sealed
                plain.send("cl", b"x%d" % i, key=b"o%d" % i, partition=0)
                plain.flush()
            assert len(store.partition("cl", 0).leader.bases) > 3
            lifecycle.clean_partition(store, "cl", 0, force_compact=True)
            second.abort()
        lifecycle.clean_partition(store, "cl", 0, force_compact=True)
        committed = _compacted_values(store, "cl", "read_committed")
        assert (committed[b"a"], committed[b"b"]) == (b"a1", b"b1")
        # the aborted batches are gone, as Kafka's cleaner discards them
        assert _compacted_values(store, "cl", "read_uncommitted") == committed


# -- access control ------------------------------------------------------------------------------------
def test_describe_transactions_names_only_the_topics_the_caller_may_describe(data_dir):
    """Describe on a transactional id shows its transaction, but only the topics the caller may
    Describe, as Kafka's handleDescribeTransactionsRequest filters them: every topic of another
    principal's transaction was named, secret ones included."""
    import klog
    from klog.meta.acls import AclsMeta
    from klog.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
    from klog.server import Server

    def allow(rtype: ResourceType, name: str, op: Operation) -> AclBinding:
        return AclBinding(rtype, name, PatternType.LITERAL, "User:ANONYMOUS", "*", op, Permission.ALLOW)

    with klog.open(data_dir) as store:
        store.create_topic("visible")
        store.create_topic("secret")
        AclsMeta(store.meta).add([allow(ResourceType.TRANSACTIONAL_ID, "etl", Operation.DESCRIBE),
                                  allow(ResourceType.TOPIC, "visible", Operation.DESCRIBE)])
        with Server(store=store, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
            coord = server.transactions.coordinator  # the owner's transaction, begun without ACLs in the way
            ids = coord.init_producer_id("etl", 60_000)
            coord.add_partitions("etl", ids.producer_id, ids.epoch, [("secret", 0), ("visible", 0)])
            with RawClient(server.port) as c:
                (state,) = c.send(65, 0, transactional_ids=("etl",)).transaction_states
        assert (state.error_code, state.transaction_state) == (E.none, "Ongoing")
        assert [(t.topic, tuple(t.partitions)) for t in state.topics] == [("visible", (0,))]


# -- resource exhaustion -------------------------------------------------------------------------------
def test_a_transaction_adds_a_bounded_number_of_consumer_groups(kafka_server):
    """AddOffsetsToTxn past TXN_GROUPS_MAX groups in one transaction is refused (UNKNOWN_SERVER_ERROR,
    what Kafka answers for a transaction state too large for its log) and adds nothing; the
    transaction still commits. Unbounded, one client's 4,000 groups made a 1 MB LMDB document
    rewritten at every request (15 ms each, LMDB's one writer held), and ids of them filled LMDB."""
    from klog.broker.txn_coordinator import TXN_GROUPS_MAX
    from klog.meta.transactions import TransactionsMeta

    with RawClient(kafka_server.port) as c:
        r = _init(c, "many-groups")
        pid, epoch = int(r.producer_id), int(r.producer_epoch)
        groups = [f"g{i:03d}-" + "x" * 250 for i in range(TXN_GROUPS_MAX + 1)]
        assert [_add_offsets(c, "many-groups", pid, epoch, g) for g in groups[:-1]] == [E.none] * TXN_GROUPS_MAX
        assert _add_offsets(c, "many-groups", pid, epoch, groups[-1]) == E.unknown_server_error
        assert _add_offsets(c, "many-groups", pid, epoch, groups[0]) == E.none  # one it has: nothing new
        assert len(TransactionsMeta(kafka_server.store.meta).get("many-groups").groups) == TXN_GROUPS_MAX
        assert _end(c, "many-groups", pid, epoch, True) == E.none
        r = _init(c, "many-groups")  # the next transaction starts with none
        pid, epoch = int(r.producer_id), int(r.producer_epoch)
        assert _add_offsets(c, "many-groups", pid, epoch, groups[-1]) == E.none


# -- markers -------------------------------------------------------------------------------------------
def test_a_marker_of_an_older_epoch_does_not_end_the_producers_newer_transaction(kafka_server):
    """WriteTxnMarkers (kafka-transactions.sh abort, `klog transactions abort`) naming an epoch older
    than the producer's batches in the partition is refused with INVALID_PRODUCER_EPOCH, as Kafka's
    partition leader refuses it. It ended the newer transaction there: an abort that read the
    producer's epoch before it started again aborted half of its next transaction, whose commit
    then made the other half visible alone."""
    from klog.meta.transactions import TransactionsMeta
    from tests.server.test_serve_transactions import _add, _produce_txn, _read_all, _txn_batch

    kafka_server.store.create_topic("ep", 2)
    with RawClient(kafka_server.port) as c:
        old = _init(c, "ep-tx")
        pid, old_epoch = int(old.producer_id), int(old.producer_epoch)
        new = _init(c, "ep-tx")  # the producer starts again: the next epoch
        assert (int(new.producer_id), int(new.producer_epoch)) == (pid, old_epoch + 1)
        epoch = old_epoch + 1
        assert _add(c, "ep-tx", pid, epoch, "ep", (0, 1)) == {("ep", 0): E.none, ("ep", 1): E.none}
        for p in (0, 1):
            assert _produce_txn(c, "ep-tx", "ep", p, _txn_batch([b"half-%d" % p], pid, epoch, 0)) == E.none
        from kio.schema.write_txn_markers.v1 import request as wm

        marker = wm.WritableTxnMarker(producer_id=pid, producer_epoch=old_epoch, transaction_result=False,
                                      coordinator_epoch=0, topics=(wm.WritableTxnMarkerTopic(
                                          name="ep", partition_indexes=(0,)),))
        (result,) = c.send(27, 1, markers=(marker,)).markers
        # its coordinator runs the transaction there: refused for that first
        # (test_serve_marker_refused_while_coordinated); the epoch check, with the id forgotten
        assert result.topics[0].partitions[0].error_code == E.transaction_coordinator_fenced
        meta = TransactionsMeta(kafka_server.store.meta)
        doc = meta.get("ep-tx")
        meta.apply("ep-tx", lambda m, t: None)
        (result,) = c.send(27, 1, markers=(marker,)).markers
        assert result.topics[0].partitions[0].error_code == E.invalid_producer_epoch
        meta.apply("ep-tx", lambda m, t: doc)
        assert kafka_server.store.partition("ep", 0).high_watermark() == 1  # no marker written
        assert _end(c, "ep-tx", pid, epoch, True) == E.none
    assert sorted(_read_all(kafka_server.bootstrap, "ep", 2, "read_committed", expect=2)) == [b"half-0", b"half-1"]


def test_a_plain_batch_under_the_id_of_a_producer_in_a_transaction_is_refused(kafka_server):
    """An idempotent (non-transactional) batch under the producer id of a transaction open in the
    partition is refused with INVALID_TXN_STATE, as Kafka refuses it. It was appended: any client
    allowed to write the topic (producer ids are in every fetched batch) raised the producer's
    epoch there, and the transactional producer's next batch was refused (INVALID_PRODUCER_EPOCH)."""
    from tests.serve_helpers import batch
    from tests.server.test_serve_transactions import _add, _produce_txn, _read_all, _txn_batch

    kafka_server.store.create_topic("pl")
    with RawClient(kafka_server.port) as c:
        r = _init(c, "pl-tx")
        pid, epoch = int(r.producer_id), int(r.producer_epoch)
        assert _add(c, "pl-tx", pid, epoch, "pl", (0,)) == {("pl", 0): E.none}
        assert _produce_txn(c, "pl-tx", "pl", 0, _txn_batch([b"t0"], pid, epoch, 0)) == E.none
        with RawClient(kafka_server.port) as stranger:
            assert _produce_txn(stranger, None, "pl", 0, batch([b"x"], producer_id=pid, epoch=epoch + 1,
                                                               sequence=0)) == E.invalid_txn_state
        assert _produce_txn(c, "pl-tx", "pl", 0, _txn_batch([b"t1"], pid, epoch, 1)) == E.none
        assert _end(c, "pl-tx", pid, epoch, True) == E.none
    assert _read_all(kafka_server.bootstrap, "pl", 1, "read_committed", expect=2) == [b"t0", b"t1"]


def test_a_partition_that_cannot_take_its_marker_holds_back_no_other(data_dir, monkeypatch):
    """A commit whose marker fails in one partition (its disk failing) still writes the others',
    so their read_committed readers move on; the transaction stays PrepareCommit until the failing
    one takes its marker, which a later pass writes. The first failure stopped the loop: every
    partition after it in the transaction stayed unstable (readers held) for as long as it failed."""
    import klog
    from klog.broker.batches import RawAppender
    from klog.broker.offsets import last_stable_offset
    from klog.broker.txn_coordinator import PREPARE_STALE_MS, TxnCoordinator
    from klog.errors import StorageError
    from klog.meta import transactions as tx
    from tests.server.test_serve_transactions import _txn_batch

    now = [1_000_000]
    with klog.open(data_dir) as store:
        store.create_topic("mk", 3)
        appender = RawAppender(store)
        coord = TxnCoordinator(store, appender, clock=lambda: now[0])
        ids = coord.init_producer_id("mk", 60_000)
        coord.add_partitions("mk", ids.producer_id, ids.epoch, [("mk", p) for p in range(3)])
        for p in range(3):
            check = lambda h, p=p: coord.check_append("mk", h.producer_id, h.producer_epoch, ("mk", p))  # noqa: E731
            appender.append("mk", p, _txn_batch([b"v%d" % p], ids.producer_id, ids.epoch, 0), "all", check)
        write_marker = appender.write_marker

        def failing_in_partition_0(topic, partition, *args, **kwargs):  # noqa: ANN001, ANN202
            if partition == 0:
                raise StorageError("mk-0: input/output error")
            return write_marker(topic, partition, *args, **kwargs)

        monkeypatch.setattr(appender, "write_marker", failing_in_partition_0)
        with pytest.raises(StorageError):
            coord.end_txn("mk", ids.producer_id, ids.epoch, True)
        assert [last_stable_offset(store.partition("mk", p)) for p in range(3)] == [0, 2, 2]
        assert TxnCoordinatorState.of(store, "mk") == tx.PREPARE_COMMIT
        monkeypatch.undo()
        now[0] += PREPARE_STALE_MS
        assert coord.tick() == ["transactional id 'mk': completed its PrepareCommit"]
        assert [last_stable_offset(store.partition("mk", p)) for p in range(3)] == [2, 2, 2]
        assert TxnCoordinatorState.of(store, "mk") == tx.COMPLETE_COMMIT


def test_describe_transactions_reads_only_the_ids_asked(kafka_server, monkeypatch):
    """DescribeTransactions reads the documents of the ids it names, not every id's: at the pool's
    40,000 ids one request for one id cost 1.4-3 s of a worker thread (0.02-0.03 s now), and any
    client, allowed to describe nothing, could send them back to back."""
    from klog.meta.transactions import TransactionsMeta
    from tests.server.test_serve_transactions import _add

    kafka_server.store.create_topic("da")
    with RawClient(kafka_server.port) as c:
        r = _init(c, "asked")
        _init(c, "not-asked")
        # (ongoing: an Empty id's start time is Kafka's -1, which kio cannot read back)
        assert _add(c, "asked", int(r.producer_id), int(r.producer_epoch), "da", (0,)) == {("da", 0): E.none}

        def every_id(_self):  # noqa: ANN001, ANN202
            raise AssertionError("DescribeTransactions read every transactional id")

        monkeypatch.setattr(TransactionsMeta, "all", every_id)
        asked, missing, store_key = c.send(65, 0, transactional_ids=(
            "asked", "nobody", "\0coordinator-epoch")).transaction_states
    assert (asked.error_code, asked.transaction_state) == (E.none, "Ongoing")
    assert int(asked.producer_id) == int(r.producer_id)
    assert missing.error_code == store_key.error_code == E.transactional_id_not_found


def test_offset_fetch_require_stable_parses_only_the_transactions_naming_the_group(kafka_server, monkeypatch):
    """OffsetFetch with require_stable (every read_committed consumer's) parses only the transaction
    documents that stage offsets for its group, found by the group's name in their bytes: it parsed
    every id's (0.65-1.1 s per request at the pool's 40,000 ids, 0.08-0.11 s now). A name that JSON
    escapes is found too."""
    from klog.meta.transactions import TransactionsMeta

    kafka_server.store.create_topic("rs")
    group = 'g"\u00fc\\'  # a quote, a non-ASCII letter and a backslash, each escaped in the JSON
    with RawClient(kafka_server.port) as c:
        for tid, staged_group in (("rs-tx", group), ("rs-other", "other")):
            r = _init(c, tid)
            pid, epoch = int(r.producer_id), int(r.producer_epoch)
            assert _add_offsets(c, tid, pid, epoch, staged_group) == E.none
            assert _txn_offset_commit(c, tid, pid, epoch, staged_group, "rs", 5) == E.none

        def every_id(_self):  # noqa: ANN001, ANN202
            raise AssertionError("OffsetFetch parsed every transactional id")

        monkeypatch.setattr(TransactionsMeta, "all", every_id)
        assert _offset_fetch(c, group, "rs", stable=True) == (E.unstable_offset_commit, -1)
        assert _offset_fetch(c, "g", "rs", stable=True) == (E.none, -1)



def test_list_transactions_authorizes_by_key_in_a_thread(kafka_server, monkeypatch):
    """ListTransactions decides which ids the caller may Describe from their keys, in a worker thread,
    and parses only those documents: at the pool's 40,000 ids it authorized each on the event loop
    and parsed every document (1.0-1.5 s a request, the loop held 0.3-0.44 s; now 0.13-0.9 s)."""
    import threading

    from klog.meta.transactions import TransactionsMeta
    from klog.server.context import RequestContext

    authorize = RequestContext.authorize
    asked_in: set[str] = set()

    def noting_the_thread(self, operation, resource_type, name):  # noqa: ANN001, ANN202
        if resource_type == "TRANSACTIONAL_ID":
            asked_in.add(threading.current_thread().name)
        return authorize(self, operation, resource_type, name)

    def every_id(_self):  # noqa: ANN001, ANN202
        raise AssertionError("ListTransactions parsed every transactional id")

    with RawClient(kafka_server.port) as c:
        for tid in ("la", "lb"):
            _init(c, tid)
        monkeypatch.setattr(RequestContext, "authorize", noting_the_thread)
        monkeypatch.setattr(TransactionsMeta, "all", every_id)
        listed = c.send(66, 0, state_filters=(), producer_id_filters=()).transaction_states
    assert sorted(s.transactional_id for s in listed) == ["la", "lb"]
    assert asked_in and kafka_server._thread.name not in asked_in


# -- the last stable offset and the log start -----------------------------------------------------------
def test_the_last_stable_offset_is_never_below_the_log_start(kafka_server):
    """Records deleted (DeleteRecords, retention) past the start of a transaction still open: the
    last stable offset read_committed clients are told (ListOffsets' latest, Fetch's
    last_stable_offset) is the log start, as Kafka's max(first unstable offset, log start). It was
    the transaction's first offset, below the log start: a read_committed consumer reset to the
    latest offset was sent below the log start (OFFSET_OUT_OF_RANGE, and reset there again) until
    the transaction ended."""
    from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsTopic

    from klog.broker import lifecycle
    from tests.serve_helpers import batch, fetch_fields, produce
    from tests.server.test_serve_transactions import _add, _produce_txn, _txn_batch

    kafka_server.store.create_topic("ls")
    with RawClient(kafka_server.port) as c:
        assert produce(c, "ls", 0, batch([b"before"])) == (E.none, 0)
        r = _init(c, "ls-tx")
        pid, epoch = int(r.producer_id), int(r.producer_epoch)
        assert _add(c, "ls-tx", pid, epoch, "ls", (0,)) == {("ls", 0): E.none}
        assert _produce_txn(c, "ls-tx", "ls", 0, _txn_batch([b"open"], pid, epoch, 0)) == E.none  # offset 1
        assert [produce(c, "ls", 0, batch([value])) for value in (b"a", b"b")] == [(E.none, 2), (E.none, 3)]
        lifecycle.delete_records(kafka_server.store, "ls", before_offset=3, partitions=[0])

        def latest_committed() -> int:
            resp = c.send(2, 7, replica_id=-1, isolation_level=1, topics=(ListOffsetsTopic(name="ls", partitions=(
                ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1),)),))
            return int(resp.topics[0].partitions[0].offset)

        assert latest_committed() == 3
        fetched = c.send(1, 12, **(fetch_fields("ls", 0, 3) | {"isolation_level": 1})).responses[0].partitions[0]
        assert (fetched.error_code, int(fetched.log_start_offset), int(fetched.last_stable_offset)) == (E.none, 3, 3)
        assert _end(c, "ls-tx", pid, epoch, True) == E.none
        assert latest_committed() == 5  # two records and the marker


def test_partitions_named_in_a_transaction_request_are_looked_up_in_one_thread_hop(kafka_server, monkeypatch):
    """AddPartitionsToTxn and TxnOffsetCommit look up each topic's partitions once per request, in
    one thread hop: one hop per partition made an AddPartitionsToTxn of 19,000 partitions (within
    --max-request-entries) cost 1.1-1.5 s, now 0.16-0.29 s."""
    from klog.server.context import RequestContext
    from tests.server.test_serve_transactions import _add

    kafka_server.store.create_topic("hop", 4)
    run_blocking = RequestContext.run_blocking
    hops = []

    async def counted(self, fn, *args):  # noqa: ANN001, ANN202
        hops.append(getattr(fn, "__name__", fn))
        return await run_blocking(self, fn, *args)

    with RawClient(kafka_server.port) as c:
        r = _init(c, "hop-tx")
        pid, epoch = int(r.producer_id), int(r.producer_epoch)
        monkeypatch.setattr(RequestContext, "run_blocking", counted)
        wanted = tuple(range(200))  # 4 exist
        assert set(_add(c, "hop-tx", pid, epoch, "hop", wanted).values()) == {
            E.operation_not_attempted, E.unknown_topic_or_partition}
        assert len(hops) <= 2, hops


def test_a_restart_completes_every_prepared_transaction_but_the_one_that_fails(data_dir, monkeypatch):
    """At a restart, a Prepare* transaction whose marker fails in one partition (a damaged log, a
    failing disk) is warned about and left to the timer's later passes; every other one is
    completed. recover() raised at the first: the others stayed Prepare* (their partitions' readers
    held), and klog serve's timer, which retries recover() until it passes, never ran a pass again
    (no timeout aborted any transaction for as long as the server ran)."""
    import klog
    from klog.broker.batches import RawAppender
    from klog.broker.txn_coordinator import TxnCoordinator
    from klog.errors import CorruptLogError
    from klog.meta import transactions as tx
    from tests.server.test_serve_transactions import _txn_batch

    with klog.open(data_dir) as store:
        store.create_topic("bad")
        store.create_topic("good")
        appender = RawAppender(store)
        warnings: list[str] = []
        coord = TxnCoordinator(store, appender, warn=warnings.append)
        for tid, topic in (("a-bad", "bad"), ("b-good", "good")):  # (recover() takes them in key order)
            ids = coord.init_producer_id(tid, 60_000)
            coord.add_partitions(tid, ids.producer_id, ids.epoch, [(topic, 0)])
            check = lambda h, t=tid, tp=(topic, 0): coord.check_append(t, h.producer_id, h.producer_epoch, tp)  # noqa: E731
            appender.append(topic, 0, _txn_batch([b"x"], ids.producer_id, ids.epoch, 0), "all", check)
            coord.meta.apply(tid, lambda m, _t, i=ids: (tx.end_transaction(m, i.producer_id, i.epoch, True, 0), m)[1])
        write_marker = appender.write_marker

        def damaged_bad(topic, *args, **kwargs):  # noqa: ANN001, ANN202
            if topic == "bad":
                raise CorruptLogError("damaged segment", "bad-0/00000000000000000000.log", 0)
            return write_marker(topic, *args, **kwargs)

        monkeypatch.setattr(appender, "write_marker", damaged_bad)
        assert coord.recover() == ["transactional id 'b-good': completed its PrepareCommit after a restart"]
        assert TxnCoordinatorState.of(store, "b-good") == tx.COMPLETE_COMMIT
        assert TxnCoordinatorState.of(store, "a-bad") == tx.PREPARE_COMMIT
        assert any("a-bad" in w and "damaged segment" in w for w in warnings)


def test_init_producer_id_refuses_an_invalid_transactional_id_for_good(kafka_server):
    """An empty transactional id (Kafka: INVALID_REQUEST), or one past klog's bound (its LMDB key),
    is answered INVALID_REQUEST: it was COORDINATOR_NOT_AVAILABLE, which clients retry until their
    timeout, then report as a coordinator that never came."""
    with RawClient(kafka_server.port) as c:
        assert [_init(c, tid).error_code for tid in ("", "x" * 1000, "ok")] == [E.invalid_request] * 2 + [E.none]
