"""PostgreSQL change data capture against a real server: Debezium's configs and envelopes, a snapshot
then logical replication (pgoutput), the topic replaying to the table's exact final state, restarts."""

from __future__ import annotations

import json

from tests.connect.helpers import records, running, wait_for


def _changes(data_dir: str, topic: str) -> list[tuple]:
    """(key, op, before, after) of each record; tombstones as (key, None, None, None)."""
    out = []
    for r in records(data_dir, topic):
        key = json.loads(r.key)["payload"] if r.key else None
        if r.value is None:
            out.append((key, None, None, None))
            continue
        p = json.loads(r.value)["payload"]
        out.append((key, p["op"], p["before"], p["after"]))
    return out


def replay(data_dir: str, topic: str, key_cols: tuple[str, ...] = ("id",)) -> dict:
    """The table a consumer rebuilds from the topic: upsert on c/u/r, delete on d, clear on t."""
    state: dict = {}
    for _key, op, before, after in _changes(data_dir, topic):
        if op in ("c", "u", "r"):
            state[tuple(after[k] for k in key_cols)] = after
        elif op == "d":
            state.pop(tuple(before[k] for k in key_cols), None)
        elif op == "t":
            state.clear()
    return state


def table_state(db, table: str, key_cols: tuple[str, ...] = ("id",)) -> dict:
    cur = db.connect().cursor()
    cur.execute(f"SELECT * FROM {table}")
    cols = [d.name for d in cur.description]
    rows = [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]
    cur.connection.close()
    return {tuple(r[k] for k in key_cols): r for r in rows}


def cdc(db, **extra) -> dict:
    return db.debezium_config(name="pg", **{"topic.prefix": "shop", "slot.name": "klog_slot",
                                            "publication.name": "klog_pub", **extra})


def test_snapshot_then_streaming_with_debezium_envelopes(pg_db, data_dir):
    pg_db.execute("CREATE TABLE items (id int PRIMARY KEY, name text, price numeric(10,2), ok boolean)")
    pg_db.execute("INSERT INTO items VALUES (1, 'one', 1.50, true), (2, 'two', 2.00, false)")
    with running(data_dir, cdc(pg_db)):
        wait_for(lambda: len(records(data_dir, "shop.public.items")) == 2, what="the snapshot")
        pg_db.execute("INSERT INTO items VALUES (3, 'three', 3.25, true)")
        pg_db.execute("UPDATE items SET name = 'uno' WHERE id = 1")
        pg_db.execute("DELETE FROM items WHERE id = 2")
        pg_db.execute("UPDATE items SET id = 30 WHERE id = 3")  # a primary key change
        wait_for(lambda: len(records(data_dir, "shop.public.items")) == 9, what="the changes")
    changes = _changes(data_dir, "shop.public.items")
    assert [(k, op) for k, op, _, _ in changes] == [
        ({"id": 1}, "r"), ({"id": 2}, "r"), ({"id": 3}, "c"), ({"id": 1}, "u"), ({"id": 2}, "d"), ({"id": 2}, None),
        ({"id": 3}, "d"), ({"id": 3}, None), ({"id": 30}, "c")]
    assert changes[4][2] == {"id": 2, "name": None, "price": None, "ok": None}  # REPLICA IDENTITY DEFAULT: the key
    first = json.loads(records(data_dir, "shop.public.items")[0].value)
    assert first["schema"]["name"] == "shop.public.items.Envelope"
    source = first["payload"]["source"]
    assert source["connector"] == "postgresql" and source["name"] == "shop" and source["table"] == "items"
    assert source["snapshot"] == "true" and first["payload"]["after"]["price"] == "AJY="  # 1.50 as Decimal bytes
    created = json.loads(records(data_dir, "shop.public.items")[2].value)["payload"]
    assert created["source"]["txId"] > 0 and created["source"]["lsn"] > 0 and created["ts_ms"] > 0
    assert replay(data_dir, "shop.public.items").keys() == table_state(pg_db, "items").keys()
