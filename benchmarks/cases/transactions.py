"""Transactions through `klog serve`: transactional beside idempotent produce, commit latency, fetch.

- produce: confluent-kafka, N records of 100 B at acks=all, as transactions of 1,000 records, beside
  the same producer idempotent (enable.idempotence) without transactions: records/s of each.
- commit latency: C transactions of 10 records each, commit_transaction() wall time, p50/p99
  (EndTxn -> markers appended and fsynced -> the coordinator's state durable).
- read_committed Fetch right after an append, with 10, 10,000 and 100,000 batches in the active
  segment (one open-then-committed transaction among them), beside read_uncommitted: the median
  wall time of one Fetch v12 (raw kio request) after each of 50 appends.

Each figure is the median of R rounds.
"""

from __future__ import annotations

import os
import statistics
import time

from harness import REPO, Bench, rate
from serve_process import Serve


def _env(data_dir: str) -> dict:
    return {**os.environ, "PYTHONPATH": REPO, "KLOG_DATA_DIR": data_dir}


def produce_rates(bootstrap: str, records: int) -> tuple[float, float]:
    import confluent_kafka as ck

    value = b"x" * 100
    idem = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    started = time.perf_counter()
    for _ in range(records):
        _produce(idem, "idem", value)
    idem.flush(60)
    idem_rate = records / (time.perf_counter() - started)
    txn = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{time.monotonic_ns()}",
                       "linger.ms": 5})
    txn.init_transactions(30)
    started = time.perf_counter()
    for start in range(0, records, 1000):
        txn.begin_transaction()
        for _ in range(min(1000, records - start)):
            _produce(txn, "txn", value)
        txn.commit_transaction(60)
    txn_rate = records / (time.perf_counter() - started)
    return idem_rate, txn_rate


def _produce(producer, topic: str, value: bytes) -> None:  # noqa: ANN001 - a confluent_kafka.Producer
    """One record, waiting (polling delivery reports) while the producer's queue is full."""
    while True:
        try:
            producer.produce(topic, value)
            return
        except BufferError:
            producer.poll(0.01)


def commit_latencies(bootstrap: str, commits: int) -> list[float]:
    import confluent_kafka as ck

    txn = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"lat-{time.monotonic_ns()}",
                       "linger.ms": 0})
    txn.init_transactions(30)
    out = []
    for _ in range(commits):
        txn.begin_transaction()
        for _ in range(10):
            txn.produce("lat", b"y" * 100)
        txn.flush(30)
        started = time.perf_counter()
        txn.commit_transaction(30)
        out.append(time.perf_counter() - started)
    return out


def fill(data_dir: str, topic: str, batches: int) -> None:
    """`batches` single-record batches in the active segment, with one committed transaction."""
    import klog
    from klog.store import codec
    from klog.store.txn import COMMIT, control_batch
    from tests.server.test_serve_transactions import _txn_batch

    with klog.open(data_dir) as store:
        store.create_topic(topic, configs={"segment.bytes": str(1 << 30)})
        part = store.partition(topic, 0)
        with part.lock:
            part.open_for_write()
            ts = int(time.time() * 1000)
            part.append_batch(_txn_batch([b"t"], 12345, 0, 0))
            for i in range(batches - 2):
                part.append_batch(codec.encode_batch([(None, b"v%d" % i, [], ts)], 0), "none")
            part.append_batch(control_batch(12345, 0, COMMIT, 0, ts))
            part.publish()


def fetch_latency(port: int, topic: str, isolation: int, samples: int = 50) -> float:
    from tests.serve_helpers import RawClient, batch, fetch_fields, produce

    with RawClient(port) as client:
        hw = 0
        times = []
        for _ in range(samples):
            err, base = produce(client, topic, 0, batch([b"more"]))
            assert err == 0, err
            hw = base + 1
            fields = fetch_fields(topic, 0, hw - 1)
            fields["isolation_level"] = isolation
            started = time.perf_counter()
            resp = client.send(1, 12, **fields)
            times.append(time.perf_counter() - started)
            p = resp.responses[0].partitions[0]
            assert p.error_code == 0 and int(p.last_stable_offset if isolation else p.high_watermark) == hw
        return statistics.median(times)


def run(bench: Bench) -> None:
    records, commits = bench.size(50_000, 500), bench.size(200, 5)
    rows: dict[str, list[float]] = {}
    sizes = (10, 10_000, 100_000) if not bench.smoke else (10, 100)
    for r in range(bench.rounds(3)):
        data_dir = os.path.join(bench.tmp, f"round-{r}")
        for n in sizes:
            fill(data_dir, f"f{n}", n)
        serve = Serve(data_dir, _env(data_dir))
        try:
            idem, txn = produce_rates(serve.bootstrap, records)
            rows.setdefault("idempotent", []).append(idem)
            rows.setdefault("transactional", []).append(txn)
            lat = sorted(commit_latencies(serve.bootstrap, commits))
            rows.setdefault("p50", []).append(1000 * lat[len(lat) // 2])
            rows.setdefault("p99", []).append(1000 * lat[max(0, int(len(lat) * 0.99) - 1)])
            for n in sizes:
                for isolation in (0, 1):
                    rows.setdefault(f"fetch {n} {isolation}", []).append(
                        1000 * fetch_latency(serve.port, f"f{n}", isolation))
        finally:
            serve.close()
    med = {name: statistics.median(values) for name, values in rows.items()}
    bench.row(f"produce through klog serve, confluent-kafka, acks=all, {records:,} records of 100 B, "
              "transactions of 1,000", rate(med["transactional"], 1),
              f"{med['transactional'] / med['idempotent']:.2f}x idempotent without transactions "
              f"({rate(med['idempotent'], 1)})")
    bench.row(f"commit_transaction() of 10 records, {commits} commits",
              f"p50 {med['p50']:.1f} ms, p99 {med['p99']:.1f} ms")
    for n in sizes:
        bench.row(f"Fetch v12 right after an append, {n:,} batches in the active segment: read_committed",
                  f"{med[f'fetch {n} 1']:.2f} ms", f"read_uncommitted: {med[f'fetch {n} 0']:.2f} ms")
