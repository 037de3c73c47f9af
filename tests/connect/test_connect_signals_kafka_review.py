"""The kafka signal channel under what a running worker meets: its group expelling it (a blocking snapshot
outlasting max.poll.interval.ms), a task start that fails, the signal topic deleted, the signal store
restarting (klog/connect/signals.py, the PostgreSQL source's use of it)."""

from __future__ import annotations

import time

import pytest

from klog.connect import signals
from klog.connect.errors import ConfigError
from tests.connect.helpers import wait_for
from tests.connect.test_connect_signals_kafka import _committed, _send


def _channel(data_dir: str, warnings: list[str], **extra: str) -> signals.KafkaChannel:
    return signals.KafkaChannel({"signal.kafka.bootstrap.servers": data_dir, "signal.kafka.groupId": "shop-signals",
                                 **extra}, "shop", "pg", warnings.append)


def _read_until(channel: signals.KafkaChannel, signal_id: str, seconds: float = 10) -> list[str]:
    """The ids the channel hands over until `signal_id` is among them (bounded in time)."""
    ids: list[str] = []
    deadline = time.monotonic() + seconds
    while signal_id not in ids and time.monotonic() < deadline:
        ids += [s[0] for s in channel.read()]
        time.sleep(0.02)
    return ids


def test_a_signal_held_is_not_handed_over_again_by_a_consumer_made_again(data_dir):
    """A blocking snapshot's signal read, its offset held until the snapshot ends; the channel's consumer made
    again meanwhile (a read that failed) starts where the channel read to, not at the committed offset: the
    signal is not handed over again (the snapshot is not taken twice), and the offsets commit after it."""
    _send(data_dir, ("shop", {"id": "b1", "type": "execute-snapshot",
                              "data": {"data-collections": ["public.extra"], "type": "blocking"}}))
    warnings: list[str] = []
    channel = _channel(data_dir, warnings)
    try:
        assert [s[0] for s in channel.read()] == ["b1"]  # acted on: a blocking snapshot, its offset held
        channel._drop_consumer()
        _send(data_dir, ("shop", {"id": "l2", "type": "log", "data": {"message": "after"}}))
        assert _read_until(channel, "l2") == ["l2"]
        channel.commit()
    finally:
        channel.close(commit=False)
    assert _committed(data_dir) == 2


def test_signal_consumer_properties_are_checked(data_dir):
    with pytest.raises(ConfigError, match="signal.consumer.max.poll.interval.ms"):
        _channel(data_dir, [], **{"signal.consumer.max.poll.interval.ms": "soon"})


@pytest.mark.slow
@pytest.mark.parametrize("bad", [{"database.dbname": "nosuchdb"}, {"signal.data.collection": "nodots"}])
def test_a_task_start_that_fails_closes_the_kafka_channel(pg_db, data_dir, monkeypatch, bad):
    """The worker stops a task only after a start that returned: a start failing after the kafka channel was
    opened (a database that does not exist, a bad signal.data.collection) closes it, its store and consumer."""
    import klog
    from klog.connect.api import TaskContext
    from klog.connect.connectors.postgres import PostgresTask
    from tests.connect.test_connect_signals_kafka import _kafka_config

    klog.open(data_dir).close()
    closed: list[bool] = []
    original = signals.KafkaChannel.close

    def counted(self, commit: bool = True) -> None:  # noqa: ANN001
        closed.append(commit)
        original(self, commit)

    monkeypatch.setattr(signals.KafkaChannel, "close", counted)
    task = PostgresTask()
    task.initialize(TaskContext("pg", 0, print))
    with pytest.raises(Exception, match="nosuchdb|signal.data.collection"):
        task.start({**_kafka_config(pg_db, data_dir), "errors.max.retries": "0", **bad})
    assert closed == [False]


@pytest.mark.slow
def test_the_signals_before_one_cut_by_a_lost_connection_are_acted_on_again_too(pg_db, data_dir, monkeypatch):
    """One read of the kafka channel: a stop-snapshot, then an execute-snapshot whose first chunk loses the
    connection. Reconnected, the connector goes on from the offsets before that read: both signals are acted
    on again (the stop is not lost: the paused snapshot stays stopped, the new one runs)."""
    from tests.connect.signal_snapshots import paused_with_a_cut_armed
    from tests.connect.test_connect_signals import _ops, _setup
    from tests.connect.test_connect_signals_kafka import _kafka_config

    _setup(pg_db)
    warnings: list[str] = []
    config = _kafka_config(pg_db, data_dir, **{"incremental.snapshot.chunk.size": "2"})
    with paused_with_a_cut_armed(monkeypatch, pg_db, data_dir, config, warnings,
                                 lambda task: (task.incremental or {}).get("id") == "k2") as cut:
        _send(data_dir, ("shop", {"id": "s1", "type": "stop-snapshot", "data": {}}),
              ("shop", {"id": "k2", "type": "execute-snapshot",
                        "data": {"data-collections": ["public.items"], "type": "incremental"}}))
        wait_for(lambda: len(_ops(data_dir, "shop.public.items")) == 2, what="the second snapshot", timeout=15)
        wait_for(lambda: any("incremental snapshot finished" in w for w in warnings), what="its end")
    assert cut == ["armed", "cut"]
    assert sum("stop-snapshot signal 's1': incremental snapshot stopped" in w for w in warnings) == 2
    assert _ops(data_dir, "shop.public.items") == [(1, "r", "incremental"), (2, "r", "incremental")]
    assert len(_ops(data_dir, "shop.public.extra")) == 2  # the first snapshot stopped, not resumed


@pytest.mark.slow
def test_a_kafka_signals_offset_is_committed_only_once_its_progress_is_stored(pg_db, data_dir, monkeypatch):
    """The worker killed after the poll that acted on a kafka execute-snapshot, before it stored the task's
    offsets (the snapshot's progress): the signal's offset is not committed either, so the next start reads
    it again and takes the snapshot (committed in that poll, the signal was lost)."""
    from klog.connect.worker import SourceRunner
    from tests.connect.helpers import running
    from tests.connect.test_connect_signals import _ops, _setup, _slot_made
    from tests.connect.test_connect_signals_kafka import _kafka_config

    _setup(pg_db)
    original, armed = SourceRunner.commit, []

    def killed(self, task):  # noqa: ANN001, ANN202
        if armed and any("incremental_snapshot" in (o or {}) for o in self.pending.values()):
            raise RuntimeError("the worker is killed")  # before the snapshot's progress is stored
        original(self, task)

    config = _kafka_config(pg_db, data_dir)
    with monkeypatch.context() as m:
        m.setattr(SourceRunner, "commit", killed)
        warnings: list[str] = []
        with running(data_dir, config, warnings=warnings):
            _slot_made(pg_db)
            armed.append(True)
            _send(data_dir, ("shop", {"id": "k1", "type": "execute-snapshot",
                                      "data": {"data-collections": ["public.items"], "type": "incremental"}}))
            wait_for(lambda: any("the worker is killed" in w for w in warnings), what="the kill")
    assert _committed(data_dir) is None
    assert _ops(data_dir, "shop.public.items") == []
    warnings = []
    with running(data_dir, config, warnings=warnings):
        wait_for(lambda: any("incremental snapshot finished" in w for w in warnings), what="the snapshot")
        wait_for(lambda: _committed(data_dir) == 1, what="the signal's offset committed")
    assert _ops(data_dir, "shop.public.items") == [(1, "r", "incremental"), (2, "r", "incremental")]


@pytest.mark.slow
def test_a_signal_topic_deleted_then_made_again_is_read_from_its_beginning(data_dir):
    """The signal topic deleted while the channel reads it, then made again: its first signal is read (not
    skipped as below the old topic's committed offset), and the deletion is named."""
    import klog

    _send(data_dir, ("shop", {"id": "a", "type": "log", "data": {}}), ("shop", {"id": "b", "type": "log", "data": {}}))
    warnings: list[str] = []
    channel = _channel(data_dir, warnings)
    try:
        assert _read_until(channel, "b") == ["a", "b"]
        channel.commit()
        with klog.open(data_dir) as store:
            store.delete_topic("shop-signal")
        assert channel.read() == []
        _send(data_dir, ("shop", {"id": "c", "type": "log", "data": {}}))
        assert _read_until(channel, "c", seconds=3) == ["c"]
    finally:
        channel.close()
    assert sum("signal.kafka.topic 'shop-signal' was deleted" in w for w in warnings) == 1


@pytest.mark.slow
def test_the_signal_store_klog_serve_restarting(data_dir):
    """signal.kafka.bootstrap.servers a klog serve that stops and starts again: while it is down a read
    returns at once (the stream it sits in is not held); a signal sent meanwhile is read once it is back, not
    twice, and its offset committed."""
    import klog
    from klog.server import Server

    _send(data_dir, ("shop", {"id": "a", "type": "log", "data": {}}))
    warnings: list[str] = []
    with Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        port = server.port
        channel = signals.KafkaChannel({"signal.kafka.bootstrap.servers": f"127.0.0.1:{port}",
                                        "signal.kafka.groupId": "shop-signals"}, "shop", "pg", warnings.append)
        try:
            assert _read_until(channel, "a") == ["a"]
            channel.commit()
        except BaseException:
            channel.close()
            raise
    try:
        for _ in range(3):
            started = time.monotonic()
            try:
                assert channel.read() == []
            except Exception:  # noqa: BLE001, S110 - the task names it in a warning and reads again later
                pass
            assert time.monotonic() - started < 3
        _send(data_dir, ("shop", {"id": "b", "type": "log", "data": {}}))
        with Server(data_dir, listen=("127.0.0.1", port), idle_ms=30_000):
            ids: list[str] = []
            deadline = time.monotonic() + 20
            while "b" not in ids and time.monotonic() < deadline:
                try:
                    ids += [s[0] for s in channel.read()]
                except Exception:  # noqa: BLE001, S110 - reconnecting
                    pass
                time.sleep(0.1)
            assert ids == ["b"]
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                try:
                    channel.read()
                    channel.commit()
                    break
                except Exception:  # noqa: BLE001 - the group rejoined after the restart: committed next time
                    time.sleep(0.2)
            assert _read_until(channel, "none", seconds=1) == []
    finally:
        channel.close(commit=False)
    with klog.open(data_dir) as store:
        assert [p.committed for p in store.describe_group("shop-signals").partitions] == [2]


@pytest.mark.slow
def test_a_blocking_snapshot_longer_than_max_poll_interval_is_taken_once(pg_db, data_dir, monkeypatch):
    """A kafka signal's blocking snapshot outlasting signal.consumer.max.poll.interval.ms: the group expels the
    signal consumer meanwhile; the snapshot is taken once, and the signal's offset committed after it."""
    from klog.connect.connectors.postgres import PostgresTask
    from tests.connect.helpers import running
    from tests.connect.test_connect_signals import _ops, _setup, _slot_made
    from tests.connect.test_connect_signals_kafka import _blocking_snapshot_taken, _kafka_config

    _setup(pg_db)
    original = PostgresTask._signalled_snapshot

    def slow(self, plan, resume, done):  # noqa: ANN001, ANN202
        for n, record in enumerate(original(self, plan, resume, done)):
            if n == 1:
                time.sleep(1)  # (past max.poll.interval.ms: the group expels the consumer)
            yield record

    monkeypatch.setattr(PostgresTask, "_signalled_snapshot", slow)
    warnings: list[str] = []
    config = _kafka_config(pg_db, data_dir, **{"max.batch.size": "1", "signal.consumer.max.poll.interval.ms": "300",
                                               "signal.consumer.heartbeat.interval.ms": "20"})
    with running(data_dir, config, warnings=warnings):
        _slot_made(pg_db)
        _blocking_snapshot_taken(data_dir, 3)
        pg_db.execute("INSERT INTO extra VALUES (4, 'd')")
        wait_for(lambda: len(_ops(data_dir, "shop.public.extra")) == 4, what="streaming after it")
    assert _ops(data_dir, "shop.public.extra") == [(1, "r", "first"), (2, "r", "true"), (3, "r", "last"),
                                                   (4, "c", "false")]


def test_a_read_that_fails_once_does_not_end_the_channel(data_dir):
    """The consumer's read failing once (a heartbeat's error, the cluster's): the task names it and reads
    again later; the next read gets the signals sent since (the channel was left reading nothing)."""
    from klog.errors import GroupError

    _send(data_dir, ("shop", {"id": "a", "type": "log", "data": {}}))
    warnings: list[str] = []
    channel = _channel(data_dir, warnings)
    try:
        assert _read_until(channel, "a", seconds=3) == ["a"]
        channel.commit()
        fetch, failed = channel.consumer._fetch, []

        def fails_once(*args) -> list:  # noqa: ANN002
            if not failed:
                failed.append(True)
                raise GroupError("heartbeat of group 'shop-signals' failed: the disk is full")
            return fetch(*args)

        channel.consumer._fetch = fails_once
        with pytest.raises(GroupError):
            channel.read()
        _send(data_dir, ("shop", {"id": "b", "type": "log", "data": {}}))
        assert _read_until(channel, "b", seconds=3) == ["b"]
    finally:
        channel.close()
    assert _committed(data_dir) == 2


def test_tombstones_huge_and_undecodable_values_are_left_out(data_dir):
    """A tombstone keyed topic.prefix is no signal (as Debezium's, no warning); a 1 MB value that is not
    JSON and one that is not UTF-8 are each one short warning; the signal after them is read."""
    import klog

    with klog.open(data_dir) as store:
        store.create_topic("shop-signal", partitions=1)
        with store.producer() as p:
            p.send("shop-signal", None, key=b"shop")
            p.send("shop-signal", b"x" * 1_000_000, key=b"shop")
            p.send("shop-signal", b'{"type": "log", "data": "\xff"}', key=b"shop")
            p.send("shop-signal", b'{"id": "ok", "type": "log", "data": {"message": "hi"}}', key=b"shop")
    warnings: list[str] = []
    channel = _channel(data_dir, warnings)
    try:
        assert _read_until(channel, "ok", seconds=5) == ["ok"]
    finally:
        channel.close()
    assert [w.split(": ")[1] for w in warnings] == ["signal.kafka.topic 'shop-signal' offset 1",
                                                   "signal.kafka.topic 'shop-signal' offset 2"]
    assert all(len(w) < 300 for w in warnings)
    assert _committed(data_dir) == 4


def test_two_connectors_with_one_prefix_sharing_the_default_group(data_dir):
    """Two connectors of one topic.prefix on a worker, both at the default signal.kafka.groupId: each reads the
    partition by assignment, as Debezium's consumers do, so both read the signal."""
    _send(data_dir, ("shop", {"id": "a", "type": "log", "data": {}}))
    warnings: list[str] = []
    props = {"signal.kafka.bootstrap.servers": data_dir}
    first = signals.KafkaChannel(props, "shop", "pg1", warnings.append)
    second = signals.KafkaChannel(props, "shop", "pg2", warnings.append)
    try:
        assert _read_until(first, "a", seconds=3) == ["a"]
        assert _read_until(second, "a", seconds=3) == ["a"]
    finally:
        second.close()
        first.close()
    assert warnings == []
