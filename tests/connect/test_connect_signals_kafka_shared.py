"""Several PostgreSQL connectors on one kafka signal topic with Debezium's default signal.kafka.groupId: each reads
partition 0 by assignment, as Debezium's KafkaSignalChannel does, and the group only keeps the offset
(klog/connect/signals.py)."""

from __future__ import annotations

import json
import time

import pytest

import klog
from tests.connect.helpers import running, wait_for
from tests.connect.test_connect_signals import _config, _ops, _setup

TOPIC = "all-signals"
GROUP = "kafka-signal"  # Debezium's default signal.kafka.groupId


def _connector(db, data_dir: str, name: str, prefix: str) -> dict:  # noqa: ANN001
    """A connector of its own topic.prefix, slot and publication, reading the shared signal topic at the default
    group."""
    return {**_config(db, "public.items,public.extra", **{
        "snapshot.mode": "never", "signal.enabled.channels": "source,kafka", "signal.kafka.topic": TOPIC,
        "signal.kafka.bootstrap.servers": data_dir, "signal.poll.interval.ms": "100", "topic.prefix": prefix,
        "slot.name": f"{name}_slot", "publication.name": f"{name}_pub"}), "name": name}


def _send(data_dir: str, *signals_: tuple[str, dict]) -> None:
    with klog.open(data_dir) as store:
        store.create_topic(TOPIC, partitions=1, exist_ok=True)
        with store.producer() as p:
            for key, value in signals_:
                p.send(TOPIC, json.dumps(value).encode(), key=key.encode())


def _committed(data_dir: str) -> int | None:
    with klog.open(data_dir) as store:
        if not any(g.group == GROUP for g in store.list_groups()):
            return None
        rows = [p for p in store.describe_group(GROUP).partitions if p.topic == TOPIC]
        return rows[0].committed if rows else None


def _slots_made(db) -> None:  # noqa: ANN001 - snapshot.mode=never captures what comes after the slot
    wait_for(lambda: len(db.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name IN ('pga_slot', "
                                    "'pgb_slot')")) == 2, what="both replication slots")


@pytest.mark.slow
def test_two_connectors_sharing_the_default_signal_group_each_act_on_their_own_signal_once(pg_db, data_dir):
    """Connectors `shop` and `mall` on one signal topic, both at signal.kafka.groupId kafka-signal: each takes
    the blocking snapshot its own record asks for (none the other's), once: started again, neither reads
    its signal again (the group's committed offset is past both)."""
    _setup(pg_db)
    configs = [_connector(pg_db, data_dir, "pga", "shop"), _connector(pg_db, data_dir, "pgb", "mall")]
    _send(data_dir)  # the topic there before the connectors start: each reads it from its first signal poll
    with running(data_dir, *configs):
        _slots_made(pg_db)
        time.sleep(1)  # (ten signal polls: both connectors read the topic before the signals come)
        _send(data_dir, ("shop", {"id": "s1", "type": "execute-snapshot",
                                  "data": {"data-collections": ["public.extra"], "type": "blocking"}}),
              ("mall", {"id": "m1", "type": "execute-snapshot",
                        "data": {"data-collections": ["public.items"], "type": "blocking"}}))
        wait_for(lambda: len(_ops(data_dir, "shop.public.extra")) == 3, what="shop's blocking snapshot")
        wait_for(lambda: len(_ops(data_dir, "mall.public.items")) == 2, what="mall's blocking snapshot")
        wait_for(lambda: _committed(data_dir) == 2, what="the signals' offset committed to the group")
    assert _ops(data_dir, "shop.public.extra") == [(1, "r", "first"), (2, "r", "true"), (3, "r", "last")]
    assert _ops(data_dir, "mall.public.items") == [(1, "r", "first"), (2, "r", "last")]
    assert _ops(data_dir, "shop.public.items") == [] and _ops(data_dir, "mall.public.extra") == []
    # started again: neither reads its signal again
    with running(data_dir, *configs):
        pg_db.execute("INSERT INTO extra VALUES (4, 'd')")
        pg_db.execute("INSERT INTO items VALUES (4, 'four')")
        wait_for(lambda: len(_ops(data_dir, "shop.public.extra")) == 4, what="shop's change after the restart")
        wait_for(lambda: len(_ops(data_dir, "mall.public.items")) == 3, what="mall's change after the restart")
        time.sleep(0.5)  # (five signal polls)
    assert _ops(data_dir, "shop.public.extra")[3:] == [(4, "c", "false")]
    assert _ops(data_dir, "mall.public.items")[2:] == [(4, "c", "false")]
    assert _ops(data_dir, "shop.public.items") == [(4, "c", "false")]
    assert _ops(data_dir, "mall.public.extra") == [(4, "c", "false")]
    assert _committed(data_dir) == 2
