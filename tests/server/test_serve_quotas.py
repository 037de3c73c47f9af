"""Client quotas in `klog serve`: AlterClientQuotas/DescribeClientQuotas over the protocol, and a real
producer held to its byte rate by throttling.

Goal: quotas set through the protocol land in the store (seen by `klog quotas list`) and are
enforced: a confluent-kafka producer sending as fast as it can, and a consumer reading a backlog
as fast as it can, are held within 20 % of their producer_byte_rate / consumer_byte_rate. Method:
kio-encoded admin requests on a raw socket; the client's delivered bytes over time, after the
quota's initial burst (its token bucket holds samples windows of the quota, so a fresh client may
use that much at once); windows of 200 ms to keep the test short.
"""

from __future__ import annotations

import io
import socket
import struct
import time

import pytest

import klog
from klog.meta.quotas import QuotasMeta
from klog.security.quota import entity
from klog.server import Server
from klog.server.listeners import Listener, SecurityConfig
from tests.serve_helpers import read_answer


def kio_request(sock: socket.socket, request, correlation_id: int = 1):
    """Send one kio request (header v2) and parse the response of the same version."""
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_reader, entity_writer
    from kio.static.constants import EntityType
    from kio.static.primitive import i32

    from klog.protocol.schemas import payload_module as load_payload_module

    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=request.__api_key__,
                                                    request_api_version=request.__version__,
                                                    correlation_id=i32(correlation_id), client_id="quota-test"))
    entity_writer(type(request))(buf, request)
    frame = buf.getvalue()
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    body = read_answer(sock)
    module = load_payload_module(int(request.__api_key__), int(request.__version__), EntityType.response)
    response_type = next(v for k, v in vars(module).items() if k.endswith("Response") and isinstance(v, type))
    assert struct.unpack_from(">i", body)[0] == correlation_id
    response, _ = entity_reader(response_type)(body, 5)  # correlation id + empty tagged fields
    return response




def test_alter_and_describe_client_quotas_over_the_protocol(kafka_server, data_dir):
    from kio.schema.alter_client_quotas.v1 import request as alter
    from kio.schema.describe_client_quotas.v1 import request as describe
    from kio.static.primitive import f64, i8

    with socket.create_connection(("127.0.0.1", kafka_server.port), timeout=10) as sock:
        entry = alter.EntryData(entity=(alter.EntityData(entity_type="user", entity_name="alice"),),
                                ops=(alter.OpData(key="producer_byte_rate", value=f64(1024.0), remove=False),
                                     alter.OpData(key="request_percentage", value=f64(50.0), remove=False)))
        bad = alter.EntryData(entity=(alter.EntityData(entity_type="ip", entity_name="1.2.3.4"),),
                              ops=(alter.OpData(key="producer_byte_rate", value=f64(1.0), remove=False),))
        res = kio_request(sock, alter.AlterClientQuotasRequest(entries=(entry, bad), validate_only=False))
        assert [int(e.error_code) for e in res.entries] == [0, 42]  # INVALID_REQUEST for an unknown entity type
        res = kio_request(sock, describe.DescribeClientQuotasRequest(
            components=(describe.ComponentData(entity_type="user", match_type=i8(0), match="alice"),),
            strict=False), 2)
    assert int(res.error_code) == 0
    assert [(v.key, float(v.value)) for e in res.entries for v in e.values] == [
        ("producer_byte_rate", 1024.0), ("request_percentage", 50.0)]
    with klog.open(data_dir) as store:
        assert QuotasMeta(store.meta).all() == {entity("alice"): {"producer_byte_rate": 1024.0,
                                                                  "request_percentage": 50.0}}


@pytest.mark.slow
def test_throttled_producer_held_to_its_byte_rate(data_dir):
    ck = pytest.importorskip("confluent_kafka")
    quota = 200_000  # bytes/s
    with klog.open(data_dir) as store:
        store.create_topic("q", partitions=1)
        QuotasMeta(store.meta).alter(entity(client_id="throttled"), {"producer_byte_rate": quota})
    cfg = SecurityConfig([Listener("PLAINTEXT", "127.0.0.1", 0)], quota_window_ms=200, quota_samples=11)
    with Server(data_dir, security=cfg, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        producer = ck.Producer({"bootstrap.servers": f"127.0.0.1:{server.port}", "client.id": "throttled",
                                "linger.ms": 5, "batch.size": 16384, "acks": 1,
                                "queue.buffering.max.messages": 500})  # a short queue: flush ends soon
        delivered: list[tuple[float, int]] = []
        value = b"v" * 1000
        start = time.monotonic()
        while time.monotonic() - start < 8:  # bounded: 8 s of producing as fast as the broker lets it
            try:
                producer.produce("q", value, partition=0,
                                 on_delivery=lambda err, msg: delivered.append((time.monotonic(), len(msg.value())))
                                 if err is None else None)
            except BufferError:
                producer.poll(0.05)
            producer.poll(0)
        producer.flush(15)
        del producer  # gone before the server, so it does not keep reconnecting and logging
    burst_end = start + 3  # past the 2.2 s of burst credit (11 windows of 200 ms)
    steady = [(t, n) for t, n in delivered if t >= burst_end]
    assert len(steady) > 100, len(delivered)
    rate = sum(n for _, n in steady) / (steady[-1][0] - burst_end)
    assert quota * 0.8 <= rate <= quota * 1.2, f"{rate:.0f} B/s against a quota of {quota} B/s"
    unthrottled = sum(n for t, n in delivered if t < start + 0.5) / 0.5
    print(f"throttled producer: {rate:.0f} B/s steady (quota {quota}); first 0.5 s {unthrottled:.0f} B/s")


@pytest.mark.slow
def test_throttled_consumer_held_to_its_byte_rate(data_dir):
    """consumer_byte_rate: the zero-copy fetch answer carries throttle_time_ms (patched into its
    first bytes) and the connection is muted; a consumer reading a backlog flat out is held to it."""
    ck = pytest.importorskip("confluent_kafka")
    quota, total = 200_000, 1_500_000  # bytes/s; bytes of backlog (1,500 records of 1 kB)
    with klog.open(data_dir) as store:
        store.create_topic("q", partitions=1)
        with store.producer(batch_size=16_384) as p:  # small batches: fetches can stop between them
            for _ in range(total // 1000):
                p.send("q", b"v" * 1000, partition=0)
        QuotasMeta(store.meta).alter(entity(client_id="slow-reader"), {"consumer_byte_rate": quota})
    cfg = SecurityConfig([Listener("PLAINTEXT", "127.0.0.1", 0)], quota_window_ms=200, quota_samples=11)
    with Server(data_dir, security=cfg, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        consumer = ck.Consumer({"bootstrap.servers": f"127.0.0.1:{server.port}", "client.id": "slow-reader",
                                "group.id": "unused", "enable.auto.commit": False,
                                "fetch.max.bytes": 65536, "message.max.bytes": 65536,
                                "max.partition.fetch.bytes": 65536})
        consumer.assign([ck.TopicPartition("q", 0, 0)])
        received: list[tuple[float, int]] = []
        start = time.monotonic()
        while sum(n for _, n in received) < total and time.monotonic() - start < 30:  # bounded
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                received.append((time.monotonic(), len(msg.value())))
        consumer.close()
        del consumer
    assert sum(n for _, n in received) == total
    # past the ~2 s of burst credit, counted from the first record (a loaded machine can take a second
    # to connect: from `start`, the burst then ran into the steady part and inflated its rate)
    burst_end = received[0][0] + 3
    steady = [(t, n) for t, n in received if t >= burst_end]
    rate = sum(n for _, n in steady) / (steady[-1][0] - burst_end)
    print(f"throttled consumer: {rate:.0f} B/s steady (quota {quota})")
    # (with Kafka's sampled Rate this measured ~1.45x in some runs: a throttle lasting until a large
    # sample expired, then several answers at once, landing before or after burst_end;
    # tests/security/test_quota_throttle.py shows it on a simulated clock)
    assert quota * 0.8 <= rate <= quota * 1.2, f"{rate:.0f} B/s against a quota of {quota} B/s"


def test_a_throttled_consumers_fetch_is_capped_at_its_quota_burst(data_dir):
    """As Kafka caps a consumer's fetch at what its quota's windows allow (getMaxValueInQuotaWindow):
    a Fetch asking for 1 MiB, from a client whose consumer_byte_rate bucket holds 22 kB (10 kB/s over
    11 windows of 200 ms), gets at most that, not the 100 kB there are and a throttle of ~8 s."""
    from tests.serve_helpers import RawClient, fetch_fields

    with klog.open(data_dir) as store:
        store.create_topic("q", partitions=1)
        with store.producer(batch_size=16_384) as p:
            for _ in range(100):
                p.send("q", b"v" * 1000, partition=0)
        QuotasMeta(store.meta).alter(entity(client_id="raw-test"), {"consumer_byte_rate": 10_000})
    cfg = SecurityConfig([Listener("PLAINTEXT", "127.0.0.1", 0)], quota_window_ms=200, quota_samples=11)
    with Server(data_dir, security=cfg, listen=("127.0.0.1", 0)) as server, RawClient(server.port) as client:
        answer = client.send(1, 12, **fetch_fields("q", 0, 0))
    part = answer.responses[0].partitions[0]
    assert int(part.error_code) == 0 and int(part.high_watermark) == 100
    assert 0 < len(bytes(part.records)) <= 22_000
    # (the cap is on the records, as Kafka's: the answer's own few dozen bytes may overdraw by a few ms)
    assert answer.throttle_time.total_seconds() <= 0.05
