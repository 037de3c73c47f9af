"""Debezium's kafka signal channel, pause-snapshot / resume-snapshot and skipped.operations around an
incremental snapshot's window, on the PostgreSQL source against a real server (klog/connect/signals.py)."""

from __future__ import annotations

import json
import time

import pytest

import klog
from klog.connect import signals
from klog.connect.errors import ConfigError
from tests.connect.helpers import records, running, wait_for
from tests.connect.signal_snapshots import (
    cut_signalled_snapshot,
    in_first_window,
    incremental_snapshot_ended,
    lost_connection,
    paused_in_first_window,
    paused_with_a_cut_armed,
)
from tests.connect.test_connect_signals import _config, _ops, _setup, _signal, _slot_made

TOPIC = "shop-signal"


def _kafka_config(db, data_dir: str, tables: str = "public.items,public.extra", **extra: str) -> dict:  # noqa: ANN001
    return _config(db, tables, **{"snapshot.mode": "never", "signal.enabled.channels": "source,kafka",
                                  "signal.kafka.bootstrap.servers": data_dir, "signal.kafka.groupId": "shop-signals",
                                  "signal.poll.interval.ms": "100", **extra})


def _send(data_dir: str, *signals_: tuple[str | None, dict | str]) -> None:
    """Records of the signal topic: (key, value), a dict value as JSON."""
    with klog.open(data_dir) as store:
        store.create_topic(TOPIC, partitions=1, exist_ok=True)
        with store.producer() as p:
            for key, value in signals_:
                text = value if isinstance(value, str) else json.dumps(value)
                p.send(TOPIC, text.encode(), key=None if key is None else key.encode())


BLOCKING = ("shop", {"type": "execute-snapshot", "data": {"data-collections": ["public.extra"], "type": "blocking"}})


def _committed(data_dir: str) -> int | None:
    """The signal consumer group's committed offset of the signal topic (None: none)."""
    with klog.open(data_dir) as store:
        if not any(g.group == "shop-signals" for g in store.list_groups()):
            return None
        rows = [p for p in store.describe_group("shop-signals").partitions if p.topic == TOPIC]
        return rows[0].committed if rows else None


def _blocking_snapshot_taken(data_dir: str, records: int, what: str = "the blocking snapshot") -> None:
    """A kafka signal (BLOCKING) asks for a blocking snapshot of public.extra: wait for `records` records of
    its topic, then for the signal's offset committed."""
    _send(data_dir, BLOCKING)
    wait_for(lambda: len(_ops(data_dir, "shop.public.extra")) == records, what=what)
    wait_for(lambda: _committed(data_dir) == 1, what="the signal's offset committed")


def test_kafka_signal_records_are_read_as_debezium_reads_them(data_dir):
    klog.open(data_dir).close()
    warnings: list[str] = []
    channel = signals.KafkaChannel({"signal.kafka.bootstrap.servers": data_dir}, "shop", "pg", warnings.append)
    try:
        assert channel.topic == "shop-signal" and channel.group == "kafka-signal"  # Debezium's defaults
        assert channel.signal(b"shop", b'{"id": "x", "type": "log", "data": {"message": "hi"}}', 4) == \
            ("x", "log", {"message": "hi"})
        assert channel.signal(b"shop", b'{"type": "pause-snapshot"}', 5) == ("shop-signal-5", "pause-snapshot", None)
        assert channel.signal(b"other", b'{"type": "log"}', 6) is None  # another connector's
        assert channel.signal(b"other", b'{"type": "log"}', 7) is None
        assert channel.signal(b"shop", b"{", 8) is None
        assert channel.signal(b"shop", None, 9) is None
        assert channel.read() == []  # no topic yet: named once
        assert channel.read() == []
    finally:
        channel.close()
    assert sum("key 'other' is not this connector's topic.prefix 'shop'" in w for w in warnings) == 1
    assert sum("offset 8: not a signal" in w for w in warnings) == 1
    assert sum("signal.kafka.topic 'shop-signal' does not exist" in w for w in warnings) == 1
    with pytest.raises(ConfigError, match="signal.kafka.bootstrap.servers"):
        signals.KafkaChannel({}, "shop", "pg", warnings.append)
    with pytest.raises(ConfigError, match="no klog store"):
        signals.KafkaChannel({"signal.kafka.bootstrap.servers": data_dir + "/nothing"}, "shop", "pg", print)


@pytest.mark.slow
def test_kafka_channel_signals_are_acted_on_once(pg_db, data_dir):
    """signal.enabled.channels=source,kafka: records of signal.kafka.topic keyed by topic.prefix ask for a
    blocking and an incremental snapshot; another key's record is ignored; the consumer group's offsets are
    committed, so a restart reads none of them again."""
    _setup(pg_db)
    pg_db.execute("INSERT INTO items VALUES (3, 'three')")
    warnings: list[str] = []
    config = _kafka_config(pg_db, data_dir)
    with running(data_dir, config, warnings=warnings):
        _slot_made(pg_db)
        _send(data_dir, ("other", {"type": "execute-snapshot", "data": {"data-collections": ["public.items"],
                                                                         "type": "blocking"}}),
              ("shop", {"id": "k1", "type": "execute-snapshot",
                        "data": {"data-collections": ["public.extra"], "type": "blocking"}}))
        wait_for(lambda: len(_ops(data_dir, "shop.public.extra")) == 3, what="the blocking snapshot")
        _send(data_dir, ("shop", {"type": "execute-snapshot",
                                  "data": {"data-collections": ["public.items"], "type": "incremental"}}))
        wait_for(lambda: any("incremental snapshot finished" in w for w in warnings), what="the incremental one")
        pg_db.execute("INSERT INTO extra VALUES (4, 'd')")
        wait_for(lambda: len(_ops(data_dir, "shop.public.extra")) == 4, what="streaming after them")
        wait_for(lambda: _committed(data_dir) == 3, what="the signals' offsets committed")
    assert _ops(data_dir, "shop.public.extra") == [(1, "r", "first"), (2, "r", "true"), (3, "r", "last"),
                                                   (4, "c", "false")]
    assert _ops(data_dir, "shop.public.items") == [(i, "r", "incremental") for i in (1, 2, 3)]
    assert any("key 'other' is not this connector's topic.prefix 'shop'" in w for w in warnings)
    assert not any("not implemented" in w for w in warnings)
    # started again: the signals are not read again
    with running(data_dir, config, warnings=warnings):
        pg_db.execute("INSERT INTO extra VALUES (5, 'e')")
        wait_for(lambda: len(_ops(data_dir, "shop.public.extra")) == 5, what="the change after the restart")
        time.sleep(0.5)  # (five signal polls)
    assert _ops(data_dir, "shop.public.extra")[4:] == [(5, "c", "false")]
    assert len(_ops(data_dir, "shop.public.items")) == 3


@pytest.mark.slow
def test_a_kafka_signals_blocking_snapshot_cut_short_is_taken_again(pg_db, data_dir, monkeypatch):
    """The worker stopped in the middle of a blocking snapshot a kafka signal asked for: the signal's offset
    is not committed, so the next start reads it again and takes the snapshot again."""
    _setup(pg_db)
    config = _kafka_config(pg_db, data_dir, **{"max.batch.size": "1"})
    with monkeypatch.context() as m:
        cut_signalled_snapshot(m, RuntimeError("the worker is killed"))  # (the task fails after the first row)
        with running(data_dir, config):
            _slot_made(pg_db)
            _send(data_dir, BLOCKING)
            wait_for(lambda: len(_ops(data_dir, "shop.public.extra")) == 1, what="the snapshot's first row")
        assert _committed(data_dir) is None
        with running(data_dir, config):
            wait_for(lambda: len(_ops(data_dir, "shop.public.extra")) == 4, what="the snapshot taken again")
            wait_for(lambda: _committed(data_dir) == 1, what="the signal's offset committed")
    assert _ops(data_dir, "shop.public.extra") == [(1, "r", "first"), (1, "r", "first"), (2, "r", "true"),
                                                   (3, "r", "last")]


@pytest.mark.slow
def test_pause_and_resume_an_incremental_snapshot_the_pause_outlasting_a_restart(pg_db, data_dir, monkeypatch):
    """pause-snapshot (here in the first chunk's window) stops the snapshot after that chunk; a restart keeps
    it paused; resume-snapshot (here through the kafka channel) reads the next chunks."""
    _setup(pg_db)
    pg_db.execute("INSERT INTO extra VALUES (4, 'd'), (5, 'e')")
    warnings: list[str] = []
    config = _kafka_config(pg_db, data_dir, **{"incremental.snapshot.chunk.size": "2"})
    with monkeypatch.context() as m:
        paused_in_first_window(m, pg_db)
        with running(data_dir, config, warnings=warnings):
            _slot_made(pg_db)
            _signal(pg_db, "i1", {"data-collections": ["public.extra"], "type": "incremental"})
            wait_for(lambda: len(_ops(data_dir, "shop.public.extra")) == 2, what="the first chunk")
            pg_db.execute("INSERT INTO items VALUES (3, 'three')")
            wait_for(lambda: len(records(data_dir, "shop.public.items")) == 1, what="streaming while paused")
    assert any("incremental snapshot 'i1' paused" in w for w in warnings)
    with running(data_dir, config, warnings=warnings):  # started again: still paused
        pg_db.execute("INSERT INTO items VALUES (4, 'four')")
        wait_for(lambda: len(records(data_dir, "shop.public.items")) == 2, what="streaming after the restart")
        assert len(_ops(data_dir, "shop.public.extra")) == 2
        _send(data_dir, ("shop", {"type": "resume-snapshot"}))
        wait_for(lambda: any("incremental snapshot finished" in w for w in warnings), what="the snapshot's end")
    assert _ops(data_dir, "shop.public.extra") == [(i, "r", "incremental") for i in range(1, 6)]
    assert any("incremental snapshot 'i1' resumed" in w for w in warnings)
    types = [json.loads(r.value)["payload"]["after"]["type"] for r in records(data_dir, "shop.public.debezium_signal")]
    assert types == ["execute-snapshot", "snapshot-window-open", "pause-snapshot", "snapshot-window-close",
                     "snapshot-window-open", "snapshot-window-close", "snapshot-window-open", "snapshot-window-close"]


@pytest.mark.slow
def test_changes_skipped_operations_hides_in_a_window_leave_the_chunks_rows(pg_db, data_dir, monkeypatch):
    """As Debezium's EventDispatcher (processMessage only for an event not skipped): an update or delete that
    skipped.operations hides does not drop its row from the chunk; the row is sent as read. A primary key
    change under skipped.operations=d is its create alone (no delete, no tombstone)."""
    _setup(pg_db)
    pg_db.execute("INSERT INTO extra VALUES (4, 'd')")

    def change_in_window() -> None:  # after the chunk's SELECT (rows 1 and 2 read), before its close watermark
        pg_db.execute("UPDATE extra SET name = 'A' WHERE id = 1")
        pg_db.execute("DELETE FROM extra WHERE id = 2")

    in_first_window(monkeypatch, change_in_window)
    warnings: list[str] = []
    config = _config(pg_db, "public.items,public.extra", **{"snapshot.mode": "never", "skipped.operations": "u,d",
                                                            "incremental.snapshot.chunk.size": "2"})
    with incremental_snapshot_ended(pg_db, data_dir, config, warnings):
        pg_db.execute("UPDATE items SET id = 30 WHERE id = 2")
        wait_for(lambda: len(records(data_dir, "shop.public.items")) >= 1, what="the key change")
        pg_db.execute("INSERT INTO items VALUES (5, 'five')")
        wait_for(lambda: len(records(data_dir, "shop.public.items")) >= 2, what="the insert after it")
    assert _ops(data_dir, "shop.public.extra") == [(1, "r", "incremental"), (2, "r", "incremental"),
                                                   (3, "r", "incremental"), (4, "r", "incremental")]
    assert [r.value is None for r in records(data_dir, "shop.public.items")] == [False, False]
    assert _ops(data_dir, "shop.public.items") == [(30, "c", "false"), (5, "c", "false")]


@pytest.mark.slow
def test_kafka_channel_through_a_klog_serve_address(pg_db, data_dir, kafka_server):
    """signal.kafka.bootstrap.servers a cluster's address (here klog serve's): read through the cluster
    client, its group's offsets committed there."""
    _setup(pg_db)
    _send(data_dir, BLOCKING)
    config = _kafka_config(pg_db, data_dir, **{"signal.kafka.bootstrap.servers": kafka_server.bootstrap})
    with running(data_dir, config):
        _slot_made(pg_db)
        wait_for(lambda: len(_ops(data_dir, "shop.public.extra")) == 3, what="the blocking snapshot")
        wait_for(lambda: _committed(data_dir) == 1, what="the signal's offset committed")
    assert _ops(data_dir, "shop.public.extra") == [(1, "r", "first"), (2, "r", "true"), (3, "r", "last")]


@pytest.mark.slow
def test_a_kafka_signals_blocking_snapshot_cut_by_a_lost_connection_is_taken_again(pg_db, data_dir, monkeypatch):
    """The connection lost in the middle of a kafka signal's blocking snapshot: reconnected, the connector
    takes the snapshot again (the signal kept, its offset committed after the snapshot)."""
    _setup(pg_db)
    cut_signalled_snapshot(monkeypatch, lost_connection())
    warnings: list[str] = []
    config = _kafka_config(pg_db, data_dir, **{"max.batch.size": "1"})
    with running(data_dir, config, warnings=warnings):
        _slot_made(pg_db)
        _blocking_snapshot_taken(data_dir, 4, what="the snapshot taken again")
    assert sum("connected to PostgreSQL again" in w for w in warnings) == 1
    assert _ops(data_dir, "shop.public.extra") == [(1, "r", "first"), (1, "r", "first"), (2, "r", "true"),
                                                   (3, "r", "last")]


def test_the_kafka_channels_keys_are_read_and_its_servers_required(pg_db, data_dir):
    from klog.connect.worker import validate

    config = _kafka_config(pg_db, data_dir, **{"signal.kafka.topic": "sig", "signal.kafka.poll.timeout.ms": "10",
                                               "signal.consumer.security.protocol": "PLAINTEXT"})
    assert validate(config).ignored == []  # none named in the worker's warning of ignored keys
    del config["signal.kafka.bootstrap.servers"]
    with pytest.raises(ConfigError, match="missing required configuration signal.kafka.bootstrap.servers"):
        validate(config)


def test_a_member_of_the_signal_group_holding_the_partition_does_not_keep_the_signal_from_the_connector(data_dir):
    """Debezium's consumer assigns itself partition 0 whatever its group, and so does klog's: another consumer
    holding the partition as a member of signal.kafka.groupId does not keep the connector from its signal (the
    channel's commit is refused while the group has members of its own, as Kafka refuses it: one warning)."""
    from klog.client.group import GroupConfig

    _send(data_dir, ("shop", {"type": "log", "data": {"message": "hi"}}))
    warnings: list[str] = []
    with klog.open(data_dir) as store:
        other = store.group_consumer("kafka-signal", TOPIC, config=GroupConfig(enable_auto_commit=False))
        try:
            next(other.batches(timeout_ms=0))
            assert other.assignment()
            channel = signals.KafkaChannel({"signal.kafka.bootstrap.servers": data_dir}, "shop", "pg", warnings.append)
            try:
                assert [s[1] for s in channel.read()] == ["log"]
                channel.commit()
                channel.commit()
            finally:
                channel.close(commit=False)
        finally:
            other.close()
    assert len(warnings) == 1 and warnings[0].startswith(
        "connector 'pg': signal.kafka.groupId 'kafka-signal': the offset of the signals read is not committed while "
        "the group has members of its own (cannot reset offsets: group 'kafka-signal' has 1 live member(s)")


@pytest.mark.slow
def test_a_kafka_resume_cut_by_a_lost_connection_is_acted_on_once_reconnected(pg_db, data_dir, monkeypatch):
    """The connection lost while a kafka resume-snapshot reads the next chunk: reconnected, the connector
    acts on the signal again (it is not lost with the connection) and the snapshot ends."""
    _setup(pg_db)
    warnings: list[str] = []
    config = _kafka_config(pg_db, data_dir, **{"incremental.snapshot.chunk.size": "2"})
    with paused_with_a_cut_armed(monkeypatch, pg_db, data_dir, config, warnings,
                                 lambda task: not (task.incremental or {}).get("paused")) as cut:
        _send(data_dir, ("shop", {"type": "resume-snapshot"}))
        wait_for(lambda: any("incremental snapshot finished" in w for w in warnings), what="the snapshot's end")
    assert cut == ["armed", "cut"]
    assert sum("connected to PostgreSQL again" in w for w in warnings) == 1
    assert _ops(data_dir, "shop.public.extra") == [(i, "r", "incremental") for i in range(1, 6)]
