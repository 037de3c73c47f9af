"""A Kafka broker's files in klog: old message formats, transactions, `klog dirs import`, and the
checkpoint files klog writes. Segments are built with kafka-python's builders (kafka_files.py)."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from tests.kafka_files import (
    control_batch,
    legacy_plain,
    legacy_wrapper,
    txn_index_entry,
    v2_batch,
    write_checkpoint,
    write_segment,
)

NOW = int(time.time() * 1000) - 60_000  # recent: retention.ms must not delete the imported data
GZIP, SNAPPY, LZ4 = 1, 2, 3

# (offset, key, value, timestamp) of every record in the old-format folder below
LEGACY_RECORDS = [
    (0, "k0", "v0", -1), (1, None, "v1", NOW),
    (2, "a", "1", NOW + 1), (3, "b", "2", NOW + 5),
    (4, "c", "3", -1), (5, None, "4", -1), (6, "d", None, -1),
    (7, "e", "5", NOW + 9), (8, "f", "6", -1),
    (9, "x", "y", NOW + 10),
]


def _legacy_folder(root, name: str = "old-0", preallocate: bool = True) -> str:
    """v0 and v1, plain and compressed (gzip, snappy, lz4 with v0's broken frame checksum), then
    a v2 segment whose zero-filled 10 MiB indexes are those of a broker's active segment."""
    folder = os.path.join(str(root), name)
    enc = str.encode
    write_segment(folder, 0, [
        legacy_plain(0, 0, b"k0", b"v0"), legacy_plain(1, 1, None, b"v1", NOW),
        legacy_wrapper(1, 2, [(b"a", b"1", NOW + 1), (b"b", b"2", NOW + 5)], codec=GZIP),
        legacy_wrapper(0, 4, [(b"c", b"3", 0), (None, b"4", 0), (b"d", None, 0)], codec=SNAPPY),
        legacy_wrapper(1, 7, [(b"e", b"5", NOW + 9)], codec=LZ4),
        legacy_wrapper(0, 8, [(b"f", b"6", 0)], codec=LZ4),
    ])
    write_segment(folder, 9, [v2_batch(9, [(enc("x"), enc("y"), NOW + 10)], leader_epoch=3, producer_id=42,
                                       producer_epoch=0, base_sequence=0)],  # an idempotent producer's
                  preallocate=preallocate)
    write_checkpoint(os.path.join(folder, "leader-epoch-checkpoint"), ["0 0", "3 9"])
    return folder


def _consumed(cli, topic: str, *extra: str) -> list[tuple]:
    r = cli("consume", topic, "-o", "earliest", "--json", *extra)
    assert r.exit_code == 0, r.stderr
    return [(d["offset"], d["key"], d["value"], d["timestamp"]) for d in map(json.loads, r.out.splitlines())]


def test_old_message_formats_read_in_consume_and_dump(cli, tmp_path):
    kafka_dir = tmp_path / "kafka-logs"
    _legacy_folder(kafka_dir)
    r = cli("dirs", "import", str(kafka_dir))
    assert r.exit_code == 0, r.stderr
    assert "Imported old-0" in r.out and "offsets 0..10, leader epoch 3" in r.out
    assert _consumed(cli, "old") == LEGACY_RECORDS
    assert _consumed(cli, "old", "-X", "isolation.level=read_committed") == LEGACY_RECORDS
    r = cli("consume", "old", "-G", "g", "--json")
    assert r.exit_code == 0, r.stderr
    assert [(d["offset"], d["key"], d["value"], d["timestamp"]) for d in map(json.loads, r.out.splitlines())] == (
        LEGACY_RECORDS)
    assert cli("verify").exit_code == 0
    dump = cli("dump", "old").out
    assert "producerId: 42 producerEpoch: 0 baseSequence: 0 isTransactional: false" in dump
    assert "baseOffset: 2 lastOffset: 3 count: 2" in dump and "compression: gzip" in dump
    assert "magic: 0" in dump and "magic: 1" in dump and "magic: 2" in dump
    assert "| offset: 5 timestamp: -1 key: null headers: [] payload: 4" in dump
    # the source is only read
    assert os.path.getsize(kafka_dir / "old-0" / "00000000000000000009.index") == 10485760


def test_produce_after_old_formats_keeps_every_offset(cli, tmp_path):
    _legacy_folder(tmp_path / "k")
    assert cli("dirs", "import", str(tmp_path / "k")).exit_code == 0
    assert cli("produce", "old", input=b"new\n").exit_code == 0
    got = _consumed(cli, "old")
    assert got[:-1] == LEGACY_RECORDS and got[-1][:3] == (10, None, "new")
    r = cli("verify")
    assert r.exit_code == 0 and "ok" in r.out, r.out + r.stderr


def test_hand_copied_old_formats_are_never_truncated(cli, store, tmp_path):
    """No import: the folder copied under an existing topic; the first write recovers the log
    (no replica state) and must keep magic 0/1 data, appending after it."""
    store.create_topic("old", 1)
    source = _legacy_folder(tmp_path / "k", preallocate=False)
    dest = store.partition("old", 0).leader.directory
    os.makedirs(dest, exist_ok=True)
    for name in os.listdir(dest):
        os.unlink(os.path.join(dest, name))
    for name in os.listdir(source):
        shutil.copy(os.path.join(source, name), dest)
    store.close()
    assert cli("produce", "old", input=b"new\n").exit_code == 0
    got = _consumed(cli, "old")
    assert got[:-1] == LEGACY_RECORDS and got[-1][:3] == (10, None, "new")


def test_import_keeps_log_start_and_trims_preallocated_indexes(cli, store, tmp_path):
    kafka_dir = tmp_path / "kafka-logs"
    _legacy_folder(kafka_dir)
    folder = kafka_dir / "t-1"
    write_segment(str(folder), 0, [v2_batch(0, [(b"k", b"%d" % i, NOW)]) for i in range(1)]
                  + [v2_batch(1, [(None, b"v", NOW)] * 3)], preallocate=True)
    write_checkpoint(str(kafka_dir / "log-start-offset-checkpoint"), ["t 1 2"])
    write_segment(str(kafka_dir / "__consumer_offsets-3"), 0, [v2_batch(0, [(b"g", b"offsets", NOW)])])
    r = cli("dirs", "import", str(kafka_dir))
    assert r.exit_code == 0, r.stderr
    assert not store.has_topic("__consumer_offsets")  # Kafka's bookkeeping, not data
    assert "Imported t-1" in r.out and "offsets 2..4" in r.out
    assert store.partition_count("t") == 2  # partitions 0..highest found
    assert [o for o, *_ in _consumed(cli, "t")] == [2, 3]
    r = cli("verify")
    assert r.exit_code == 0, r.out + r.stderr
    dest = store.partition("t", 1).leader.directory
    assert os.path.getsize(os.path.join(dest, "00000000000000000000.index")) % 8 == 0
    assert os.path.getsize(os.path.join(dest, "00000000000000000000.index")) < 4096
    assert cli("dirs", "import", str(kafka_dir)).exit_code != 0  # an existing topic is refused


def test_dump_shows_control_batches_like_kafka_dump_log(cli, tmp_path):
    folder = tmp_path / "k" / "tx-0"
    write_segment(str(folder), 0, [
        v2_batch(0, [(b"k", b"committed", NOW)], producer_id=7, producer_epoch=1, base_sequence=0,
                 transactional=True),
        control_batch(1, 7, 1, commit=True, ts=NOW, coordinator_epoch=5),
    ])
    r = cli("dump", str(folder / "00000000000000000000.log"))
    assert r.exit_code == 0, r.stderr
    assert "producerId: 7 producerEpoch: 1 baseSequence: 0 isTransactional: true isControl: false" in r.out
    assert "isTransactional: true isControl: true" in r.out
    assert f"| offset: 1 timestamp: {NOW} endTxnMarker: COMMIT coordinatorEpoch: 5" in r.out


def _txn_folder(root, with_txn_index: bool) -> str:
    """Producer 7 commits (1-2), producer 8 aborts (3-4 and 6), producer 9 leaves a transaction
    open (9); plain records at 0, 8 and 10. As a broker writes them: the ABORT marker's segment
    has a .txnindex entry (pid 8, first 3, last 7)."""
    folder = os.path.join(str(root), "tx-0")
    batches = [
        v2_batch(0, [(None, b"plain0", NOW)]),
        v2_batch(1, [(None, b"c1", NOW), (None, b"c2", NOW)], producer_id=7, producer_epoch=0, base_sequence=0,
                 transactional=True),
        v2_batch(3, [(None, b"a1", NOW), (None, b"a2", NOW)], producer_id=8, producer_epoch=0, base_sequence=0,
                 transactional=True),
        control_batch(5, 7, 0, commit=True, ts=NOW),
        v2_batch(6, [(None, b"a3", NOW)], producer_id=8, producer_epoch=0, base_sequence=2, transactional=True),
        control_batch(7, 8, 0, commit=False, ts=NOW),
        v2_batch(8, [(None, b"plain1", NOW)]),
        v2_batch(9, [(None, b"open", NOW)], producer_id=9, producer_epoch=0, base_sequence=0, transactional=True),
        v2_batch(10, [(None, b"after-open", NOW)]),
    ]
    entries = [txn_index_entry(8, 3, 7, 1)] if with_txn_index else None
    write_segment(folder, 0, batches, txn_entries=entries)
    return folder


ALL_TXN_VALUES = ["plain0", "c1", "c2", "a1", "a2", "a3", "plain1", "open", "after-open"]
COMMITTED_VALUES = ["plain0", "c1", "c2", "plain1"]  # stops at the last stable offset, 9


@pytest.mark.parametrize("with_txn_index", [True, False], ids=["txnindex", "rebuilt"])
def test_read_committed_skips_aborted_transactions(cli, tmp_path, with_txn_index):
    _txn_folder(tmp_path / "k", with_txn_index)
    assert cli("dirs", "import", str(tmp_path / "k")).exit_code == 0
    values = lambda *x: [v for _, _, v, _ in _consumed(cli, "tx", *x)]  # noqa: E731
    assert values() == ALL_TXN_VALUES  # read_uncommitted is the default, as in Kafka's clients
    assert values("-X", "isolation.level=read_uncommitted") == ALL_TXN_VALUES
    assert values("-X", "isolation.level=read_committed") == COMMITTED_VALUES
    r = cli("consume", "tx", "-o", "earliest", "-X", "isolation.level=read_committed")  # the value-only path
    assert r.out.splitlines() == COMMITTED_VALUES
    r = cli("consume", "tx", "-G", "g1", "-X", "isolation.level=read_committed")
    assert r.exit_code == 0 and r.out.splitlines() == COMMITTED_VALUES, r.stderr
    r = cli("consume", "tx", "-G", "g2")
    assert r.out.splitlines() == ALL_TXN_VALUES
    r = cli("consume", "tx", "-X", "isolation.level=serializable")
    assert r.exit_code == 2 and "isolation.level must be" in r.stderr


def test_txn_index_is_the_source_of_aborted_ranges_whose_marker_is_gone(store, tmp_path):
    """A .txnindex, when present, is what Kafka uses: an entry there aborts even where its ABORT
    marker is gone (Kafka's cleaner removes a marker once its transaction's data is cleaned)."""
    from klog.broker.importer import import_dirs

    folder = os.path.join(str(tmp_path / "k"), "tx-0")
    write_segment(folder, 0, [
        v2_batch(0, [(None, b"plain0", NOW)]),
        v2_batch(1, [(None, b"a1", NOW)], producer_id=8, producer_epoch=0, base_sequence=0, transactional=True),
        # (offset 2, producer 8's ABORT marker, cleaned away)
        v2_batch(3, [(None, b"plain1", NOW)]),
    ], txn_entries=[txn_index_entry(8, 1, 2, 3)])
    write_segment(folder, 4, [v2_batch(4, [(None, b"plain2", NOW)])])  # (the active segment: never cleaned)
    import_dirs(store, [str(tmp_path / "k")])
    got = [r.value.decode() for r in store.consumer("tx", isolation_level="read_committed")]
    assert got == ["plain0", "plain1", "plain2"]


def test_a_txn_index_entry_at_a_commit_marker_aborts_nothing(store, tmp_path):
    """Kafka indexes aborted ranges only: an entry ending at a COMMIT marker (a flipped byte, a
    stray file) would make read_committed readers skip committed records without a word."""
    from klog.broker.importer import import_dirs

    folder = _txn_folder(tmp_path / "k", with_txn_index=True)
    with open(os.path.join(folder, "00000000000000000000.txnindex"), "ab") as f:
        f.write(txn_index_entry(7, 1, 5, 1))  # producer 7's range, ending at its COMMIT marker
    import_dirs(store, [str(tmp_path / "k")])
    got = [r.value.decode() for r in store.consumer("tx", isolation_level="read_committed")]
    assert got == ["plain0", "c1", "c2", "plain1"]


@pytest.mark.slow
def test_verify_is_bounded_and_zero_filled_indexes_are_unused(cli, store):
    store.create_topic("t", 1)
    with store.producer() as p:
        for i in range(200):
            p.send("t", b"v" * 100, key=b"%d" % i)
    store.close()
    assert cli("verify").exit_code == 0
    folder = klog_folder(cli, "t-0")
    index = os.path.join(folder, "00000000000000000000.index")
    with open(index, "ab") as f:  # a broker's preallocated active index, copied in by hand
        f.truncate(10485760)
    r = cli("verify")
    assert r.exit_code == 0 and "ok" in r.out, r.out + r.stderr
    with open(index, "wb") as f:  # 1.3 M entries that all go backwards
        f.write(b"\xff" * 10485760)
    r = cli("verify")
    assert r.exit_code != 0
    assert len(r.out) + len(r.stderr) < 2000 and "1310720 index problems" in r.out + r.stderr


def klog_folder(cli, name: str) -> str:
    r = cli("dirs", "list", "--json")
    return os.path.join(json.loads(r.out.splitlines()[0])["path"], name)


def test_klog_keeps_kafkas_checkpoint_files_current(cli, store):
    """Parsed by tests/kafka_files.read_checkpoint, written from Kafka's format description."""
    import base64
    import uuid

    from tests.kafka_files import read_checkpoint

    store.create_topic("orders", 2)
    with store.producer() as p:
        for i in range(10):
            p.send("orders", b"v%d" % i, partition=i % 2)
    topic_id = store.topic("orders").topic_id
    store.close()
    log_dir = os.path.dirname(klog_folder(cli, "x"))
    assert read_checkpoint(os.path.join(log_dir, "replication-offset-checkpoint"), 3) == [
        ["orders", "0", "5"], ["orders", "1", "5"]]
    assert sorted(r[:2] for r in read_checkpoint(os.path.join(log_dir, "recovery-point-offset-checkpoint"), 3)) == [
        ["orders", "0"], ["orders", "1"]]
    assert read_checkpoint(os.path.join(log_dir, "log-start-offset-checkpoint"), 3) == []
    assert read_checkpoint(os.path.join(log_dir, "orders-0", "leader-epoch-checkpoint"), 2) == [["0", "0"]]
    with open(os.path.join(log_dir, "orders-1", "partition.metadata")) as f:
        lines = f.read().splitlines()
    assert lines[0] == "version: 0" and lines[1].startswith("topic_id: ")
    raw = base64.urlsafe_b64decode(lines[1].removeprefix("topic_id: ") + "==")
    assert uuid.UUID(bytes=raw) == uuid.UUID(topic_id)
    with open(os.path.join(log_dir, "meta.properties")) as f:
        props = dict(line.split("=", 1) for line in f.read().splitlines() if line and not line.startswith("#"))
    assert props["version"] == "1" and props["node.id"] == "1" and len(base64.urlsafe_b64decode(
        props["cluster.id"] + "==")) == 16
    r = cli("topics", "delete-records", "orders", "--partition", "1", "--before", "3")
    assert r.exit_code == 0, r.stderr
    assert read_checkpoint(os.path.join(log_dir, "log-start-offset-checkpoint"), 3) == [["orders", "1", "3"]]
    for name in ("replication-offset-checkpoint", "orders-0/leader-epoch-checkpoint"):
        os.unlink(os.path.join(log_dir, name))
    assert cli("dirs", "checkpoint").exit_code == 0
    assert read_checkpoint(os.path.join(log_dir, "replication-offset-checkpoint"), 3) == [
        ["orders", "0", "5"], ["orders", "1", "5"]]
    assert read_checkpoint(os.path.join(log_dir, "orders-0", "leader-epoch-checkpoint"), 2) == [["0", "0"]]


def test_old_formats_through_the_index_and_compaction(cli, store, tmp_path):
    """Many v0/v1 entries (plain and gzip wrappers) over two segments: reads from an offset in
    the middle use the index recovery rebuilt; compaction keeps the latest value per key at its
    offset."""
    from tests.kafka_files import legacy_plain as plain
    from tests.kafka_files import legacy_wrapper as wrapper

    entries, offset, values = [], 0, {}
    for i in range(300):
        if i % 3 == 0:
            recs = [(b"k%d" % (o % 7), b"x" * 50 + b"%d" % o, NOW + o) for o in range(offset, offset + 5)]
            entries.append(wrapper(1, offset, recs, codec=GZIP))
            values.update({o: r[1] for o, r in zip(range(offset, offset + 5), recs, strict=True)})
            offset += 5
        else:
            entries.append(plain(i % 2, offset, b"k%d" % (offset % 7), b"y" * 50 + b"%d" % offset, NOW + offset))
            values[offset] = b"y" * 50 + b"%d" % offset
            offset += 1
    folder = str(tmp_path / "k" / "cmp-0")
    write_segment(folder, 0, entries[:150])
    write_segment(folder, 350, entries[150:])  # entries[:150] hold offsets 0..349
    from klog.broker.importer import import_dirs

    import_dirs(store, [str(tmp_path / "k")])
    assert [(r.offset, r.value) for r in store.consumer("cmp", start="333")] == [
        (o, values[o]) for o in range(333, 700)]
    store.alter_topic("cmp", set_configs={"cleanup.policy": "compact"})
    store.compact("cmp")
    got = {r.offset: r.value for r in store.consumer("cmp")}
    latest_below_350 = {o for o in range(350) if not any(o2 % 7 == o % 7 for o2 in range(o + 1, 350))}
    assert set(got) == latest_below_350 | set(range(350, 700))
    assert all(got[o] == values[o] for o in got)
    store.close()
    assert cli("verify").exit_code == 0


def test_a_kafka_folder_copied_into_the_log_dir_is_reported_then_adopted_in_place(cli, store, tmp_path):
    log_dir = os.path.dirname(klog_folder(cli, "x"))
    store.close()
    folder = _legacy_folder(tmp_path / "k")
    shutil.copytree(folder, os.path.join(log_dir, "old-0"))
    r = cli("verify")
    assert r.exit_code != 0 and f"klog dirs import {os.path.join(log_dir, 'old-0')}" in r.out + r.stderr
    assert os.path.getsize(os.path.join(log_dir, "old-0", "00000000000000000000.log")) == os.path.getsize(
        os.path.join(folder, "00000000000000000000.log"))  # left as it is
    r = cli("dirs", "import", os.path.join(log_dir, "old-0"))
    assert r.exit_code == 0, r.stderr
    assert _consumed(cli, "old") == LEGACY_RECORDS
    assert cli("verify").exit_code == 0


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_serve_fetch_honours_isolation_level(kafka_server, store, tmp_path, isolation):
    """A Kafka client reading imported transactions through klog serve: read_committed gets the
    aborted transactions and the last stable offset in each Fetch answer and drops those records."""
    confluent = pytest.importorskip("confluent_kafka")
    from klog.broker.importer import import_dirs

    _txn_folder(tmp_path / "k", with_txn_index=False)
    import_dirs(store, [str(tmp_path / "k")])
    consumer = confluent.Consumer({"bootstrap.servers": kafka_server.bootstrap, "group.id": "g",
                                   "enable.auto.commit": False, "isolation.level": isolation})
    try:
        consumer.assign([confluent.TopicPartition("tx", 0, 0)])
        got: list[str] = []
        expected = COMMITTED_VALUES if isolation == "read_committed" else ALL_TXN_VALUES
        deadline = time.monotonic() + 20
        while len(got) < len(expected) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg.value().decode())
        for _ in range(5):  # nothing more arrives (an aborted record or one past the LSO would)
            msg = consumer.poll(0.2)
            assert msg is None or msg.error(), msg.value()
        assert got == expected
        # ListOffsets latest: the last stable offset for a read_committed client, as a broker answers
        low, high = consumer.get_watermark_offsets(confluent.TopicPartition("tx", 0), timeout=5, cached=False)
        assert (low, high) == (0, 9 if isolation == "read_committed" else 11)
    finally:
        consumer.close()


def test_serve_keeps_kafkas_checkpoint_files_current(kafka_server, store, monkeypatch):
    from klog.server import server as server_module
    from tests.kafka_files import read_checkpoint

    monkeypatch.setattr(server_module, "KAFKA_CHECKPOINT_INTERVAL_S", 0.1)
    confluent = pytest.importorskip("confluent_kafka")
    store.create_topic("s", 1)
    producer = confluent.Producer({"bootstrap.servers": kafka_server.bootstrap})
    for i in range(3):
        producer.produce("s", b"v%d" % i, partition=0)
    assert producer.flush(10) == 0
    del producer  # (librdkafka's client goes now, not after the server stopped)
    path = os.path.join(os.path.dirname(store.partition("s", 0).leader.directory), "replication-offset-checkpoint")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if os.path.exists(path) and ["s", "0", "3"] in read_checkpoint(path, 3):
            break
        time.sleep(0.1)
    assert ["s", "0", "3"] in read_checkpoint(path, 3)


def test_a_follower_ending_in_old_format_data_is_not_cut_by_leader_epochs(tmp_path, monkeypatch):
    """Magic 0/1 entries carry no leader epoch (-1): catching a follower up must not read that as
    'before every epoch' and cut it to the first epoch's start (then copy everything again)."""
    from klog.broker.replication import catch_up
    from klog.store.log import PartitionLog

    leader_dir = _legacy_folder(tmp_path / "a")
    for suffix in (".log", ".index", ".timeindex"):
        os.unlink(os.path.join(leader_dir, "00000000000000000009" + suffix))  # end on the old-format data
    follower_dir = shutil.copytree(leader_dir, str(tmp_path / "b" / "old-0"))
    leader, follower = PartitionLog(leader_dir), PartitionLog(follower_dir)
    leader.open_for_write()
    follower.open_for_write()
    cuts = []
    monkeypatch.setattr(follower, "truncate_to", lambda offset: cuts.append(offset))
    assert catch_up(leader, follower, leader.log_end_offset, [[0, 0], [3, 9]]) == 9
    assert cuts == []
    leader.close()
    follower.close()


def test_serve_hands_old_format_segments_to_kafka_clients(kafka_server, store, tmp_path):
    """Fetch sends the segment bytes as they are; a Kafka client decodes v0/v1 message sets itself."""
    confluent = pytest.importorskip("confluent_kafka")
    from klog.broker.importer import import_dirs

    _legacy_folder(tmp_path / "k")
    import_dirs(store, [str(tmp_path / "k")])
    consumer = confluent.Consumer({"bootstrap.servers": kafka_server.bootstrap, "group.id": "g",
                                   "enable.auto.commit": False})
    try:
        consumer.assign([confluent.TopicPartition("old", 0, 0)])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < len(LEGACY_RECORDS) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                key, value = msg.key(), msg.value()
                got.append((msg.offset(), key and key.decode(), value and value.decode()))
        assert got == [(o, k, v) for o, k, v, _ in LEGACY_RECORDS]
    finally:
        consumer.close()


def test_a_compacted_kafka_partition_with_offset_gaps_reads_whole(cli, tmp_path):
    """Kafka's cleaner drops the batches it emptied, so a compacted topic's cleaned segments have
    upward offset gaps between batches (klog's own cleaner does the same). Imported, the
    topic becomes compacted, every surviving record reads (from the start and from inside a gap),
    verify is clean, and a produce after it keeps every offset. The topic set to delete afterwards
    still reads whole (the import marks the log cleaned, as klog's cleaner does)."""
    folder = str(tmp_path / "k" / "cmp-0")
    enc = str.encode
    write_segment(folder, 0, [v2_batch(0, [(b"a", b"1", NOW), (b"b", b"2", NOW)]),
                              v2_batch(5, [(b"c", b"3", NOW)]), v2_batch(9, [(b"a", b"4", NOW)])])
    write_segment(folder, 12, [v2_batch(12, [(enc("d"), enc("5"), NOW)])])
    r = cli("dirs", "import", folder)
    assert r.exit_code == 0, r.stderr
    assert "cleanup.policy=compact" in r.out + r.stderr
    want = [(0, "a", "1", NOW), (1, "b", "2", NOW), (5, "c", "3", NOW), (9, "a", "4", NOW), (12, "d", "5", NOW)]
    assert _consumed(cli, "cmp") == want
    assert _consumed(cli, "cmp", "-o", "3") == want[2:]  # an offset inside a gap starts at the next record
    assert cli("verify").exit_code == 0
    assert cli("produce", "cmp", "-K:", input=b"e:6\n").exit_code == 0
    assert [o for o, *_ in _consumed(cli, "cmp")] == [0, 1, 5, 9, 12, 13]
    assert cli("topics", "alter", "cmp", "-c", "cleanup.policy=delete").exit_code == 0
    # (the import marked the log cleaned, as klog's cleaner does: its gaps stay readable under delete)
    assert [o for o, *_ in _consumed(cli, "cmp")] == [0, 1, 5, 9, 12, 13]


def test_a_producer_updates_only_the_checkpoint_lines_of_partitions_it_wrote(cli, store, monkeypatch):
    """Closing a producer visits the partitions it wrote, not every partition of the store (a
    walk of 10,000 partitions cost 8 s at each close); the other partitions' lines stay."""
    from klog.client.store import Store
    from tests.kafka_files import read_checkpoint

    store.create_topic("wide", 4)
    with store.producer() as p:
        for i in range(8):
            p.send("wide", b"v%d" % i, partition=i % 4)
    store.close()
    log_dir = os.path.dirname(klog_folder(cli, "x"))
    replication = os.path.join(log_dir, "replication-offset-checkpoint")
    assert read_checkpoint(replication, 3) == [["wide", str(p), "2"] for p in range(4)]
    from klog.broker import kafka_checkpoints

    visited: list[str] = []  # the partition folders whose checkpoint files the close looks at
    real_write = kafka_checkpoints._write_if_changed
    monkeypatch.setattr(kafka_checkpoints, "_write_if_changed",
                        lambda path, *a: visited.append(os.path.dirname(path)) or real_write(path, *a))
    with Store(store.path) as again, again.producer() as p:
        p.send("wide", b"more", partition=2)
    assert {os.path.basename(v) for v in visited if os.path.basename(v).startswith("wide-")} == {"wide-2"}
    assert read_checkpoint(replication, 3) == [["wide", "0", "2"], ["wide", "1", "2"], ["wide", "2", "3"],
                                               ["wide", "3", "2"]]
    os.unlink(replication)  # a missing file: rewritten whole from every partition
    with Store(store.path) as again, again.producer() as p:
        p.send("wide", b"more", partition=0)
    assert read_checkpoint(replication, 3) == [["wide", "0", "3"], ["wide", "1", "2"], ["wide", "2", "3"],
                                               ["wide", "3", "2"]]


def test_a_first_write_into_many_partitions_syncs_their_kafka_files_together(store, monkeypatch):
    """Each new partition gets leader-epoch-checkpoint and partition.metadata: with syncfs they are
    made durable by one syncfs, not two fsyncs each (4,000 for a first write into 1,000 partitions)."""
    from klog.store import syncfs

    if not syncfs.available():
        pytest.skip("syncfs (Linux 5.8+) is not available")
    store.create_topic("fresh", 16)
    with store.producer() as p:
        for i in range(16):
            p.send("fresh", b"v", partition=i)
    fsyncs: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: fsyncs.append(fd) or real(fd))
    store.close()
    assert len(fsyncs) < 16, len(fsyncs)  # the log directory's files only
    log_dir = store.data_dir.log_dir_path(store.log_dir_ids()[0])
    for i in range(16):
        assert os.path.exists(os.path.join(log_dir, f"fresh-{i}", "partition.metadata"))
