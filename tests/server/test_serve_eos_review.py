"""What Kafka clients of `klog serve` are told about transactions still open (the exactly-once review).

Goal: a read_committed client is never handed an offset of a record it may not read yet, as Kafka
3.9 answers. Method: a transaction left open on the served store; confluent-kafka's consumers at
both isolation levels ask ListOffsets by time.
"""

from __future__ import annotations

import time

import pytest

ck = pytest.importorskip("confluent_kafka")


def _offset_for_time(bootstrap: str, topic: str, ms: int, isolation: str) -> int:
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                            "isolation.level": isolation})
    try:
        return consumer.offsets_for_times([ck.TopicPartition(topic, 0, ms)], timeout=10)[0].offset
    finally:
        consumer.close()


def test_list_offsets_by_time_names_no_offset_past_the_last_stable_offset_to_read_committed(kafka_server):
    """A lookup by time that lands in a transaction still open is answered no offset (-1) at
    read_committed, as Kafka does (its lastFetchableOffset); read_uncommitted gets the offset; once
    the transaction commits, read_committed gets it too."""
    store = kafka_server.store
    store.create_topic("lot")
    start = int(time.time() * 1000) - 60_000  # (recent: older records are retention's)
    with store.producer() as plain:
        plain.send("lot", b"committed", timestamp=start)
    producer = store.producer(transactional_id="lot-open")
    producer.begin()
    producer.send("lot", b"open", timestamp=start + 20_000)
    producer.flush()
    asked = start + 10_000
    assert _offset_for_time(kafka_server.bootstrap, "lot", asked, "read_committed") == -1
    assert _offset_for_time(kafka_server.bootstrap, "lot", asked, "read_uncommitted") == 1
    producer.commit()
    producer.close()
    assert _offset_for_time(kafka_server.bootstrap, "lot", asked, "read_committed") == 1
