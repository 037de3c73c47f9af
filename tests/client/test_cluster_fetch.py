"""Reads through a cluster by Fetch requests (klog.client.remote.fetch_consumer): the values and
records of the local store, whatever the broker does between them (cuts the last batch of an
answer, moves the leader, moves the log start, goes away) and over TLS/SASL listeners."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

import klog
from klog.client.remote import fetch, fetch_consumer
from klog.client.remote.fetch_consumer import FetchConsumer
from klog.client.remote.store import RemoteStore
from klog.client.remote.target import ClusterTarget
from tests.conftest import REPO
from tests.klog_processes import klog_env, run_klog
from tests.server.test_serve_security import certs, secure_store, serving  # noqa: F401 - fixtures


def produce(store_or_path, topic: str) -> list[bytes | None]:  # noqa: ANN001 - a Store or its path
    """Batches of three codecs, null values among them, in a 1-partition topic; its values."""
    if isinstance(store_or_path, str):
        with klog.open(store_or_path) as s:
            return produce(s, topic)
    values: list[bytes | None] = []
    store_or_path.create_topic(topic, 1)
    for codec_name in ("gzip", "none", "lz4"):
        with store_or_path.producer(compression_type=codec_name, batch_size=700) as p:
            for i in range(300):
                value = None if i % 11 == 0 else b"%s-%d" % (codec_name.encode(), i)
                p.send(topic, value)
                values.append(value)
    return values


def local_values(data_dir: str, topic: str, **kwargs) -> list[bytes | None]:
    with klog.open(data_dir, create=False) as s, s.consumer(topic, **kwargs) as c:
        return [r.value for r in c]


def remote_values(bootstrap: str, topic: str, props: dict | None = None, **kwargs) -> list[bytes | None]:
    with RemoteStore(ClusterTarget(bootstrap, props or {})) as store, store.consumer(topic, **kwargs) as c:
        assert isinstance(c, FetchConsumer)
        return [v for chunk in c.value_chunks() for v in chunk]


def test_a_batch_cut_at_the_end_of_an_answer_is_fetched_again(kafka_server, data_dir, monkeypatch):
    """Small answers: the broker cuts their last batch; the next fetch starts at it (compressed
    batches, nulls, a start inside a batch all as the local store reads them)."""
    values = produce(data_dir, "t")
    monkeypatch.setattr(fetch_consumer, "PARTITION_BYTES", 1500)
    cut = []
    whole = fetch_consumer.whole_batches

    def spy(records: bytes, where: str):  # noqa: ANN202
        got = whole(records, where)
        cut.append(len(records) > sum(len(fb.data) for fb in got))
        return got

    monkeypatch.setattr(fetch_consumer, "whole_batches", spy)
    assert remote_values(kafka_server.bootstrap, "t") == values
    assert sum(cut) >= 3, cut  # the answers did end in a cut batch
    for start in ("45", "-17", "beginning"):
        assert remote_values(kafka_server.bootstrap, "t", start=start) == local_values(data_dir, "t", start=start)


def test_not_leader_asks_the_metadata_again_and_goes_on(kafka_server, data_dir, monkeypatch):
    values = produce(data_dir, "t")
    monkeypatch.setattr(fetch_consumer, "PARTITION_BYTES", 4000)
    ask, answers = fetch.Fetcher._ask, iter([6, 74, 0, 0, 6, 0])  # NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH

    def flaky_ask(self, broker, asked, wait_ms, max_bytes):  # noqa: ANN001, ANN202
        error = next(answers, 0)
        return {where: fetch.PartitionAnswer(error, -1, -1, b"") for where in asked} if error else \
            ask(self, broker, asked, wait_ms, max_bytes)

    monkeypatch.setattr(fetch.Fetcher, "_ask", flaky_ask)
    monkeypatch.setattr(RemoteStore, "leaders", _counting(RemoteStore.leaders, metadata := []))
    assert remote_values(kafka_server.bootstrap, "t") == values
    assert len(metadata) == 4  # the first lookup, and once per moved leader


def _counting(method, calls: list):  # noqa: ANN001, ANN202
    def counted(self, *args):  # noqa: ANN001, ANN202
        calls.append((self, *args))
        return method(self, *args)
    return counted


def test_a_log_start_moved_past_the_position_reads_on_from_it(kafka_server, data_dir):
    """OFFSET_OUT_OF_RANGE below the log start: on from the new start, as the local reader goes."""
    produce(data_dir, "t")
    with RemoteStore(ClusterTarget(kafka_server.bootstrap)) as store, store.consumer("t") as c:
        with klog.open(data_dir, create=False) as s:
            s.delete_records("t", before_offset=500)
        got = [r.offset for r in c]
    assert got == list(range(500, 900))


def test_several_partitions_merge_and_follow_as_the_local_store(kafka_server, data_dir):
    from tests.cli.test_cluster_cli import fill

    fill(data_dir, "orders", 200)
    with RemoteStore(ClusterTarget(kafka_server.bootstrap)) as store:
        with store.consumer("orders") as c:
            assert isinstance(c, FetchConsumer)
            remote = [(r.partition, r.offset, r.key, r.value, r.headers) for r in c]
        with store.consumer("orders", isolation_level="read_committed") as c:
            assert type(c).__name__ == "RemoteConsumer"  # librdkafka skips aborted transactions
        with store.consumer("orders", follow=True, count=210) as c:
            fill(data_dir, "orders", 10, start=200)
            followed = [r.value for r in c]
    with klog.open(data_dir, create=False) as s, s.consumer("orders") as c:
        local = [(r.partition, r.offset, r.key, r.value, r.headers) for r in c]
    assert remote == local[:200] and len(local) == 210
    assert followed[:200] == [v for _, _, _, v, _ in local[:200]]
    assert sorted(v for v in followed[200:] if v) == sorted(v for _, _, _, v, _ in local[200:] if v)


@pytest.mark.slow
def test_a_broker_gone_mid_read_is_one_line_and_exit_1(data_dir, tmp_path):
    """`consume -f` whose broker stops: one error line naming the partition and the address, exit
    1, within the cluster timeout (not a hang, not a traceback)."""
    from klog.server import Server

    produce(data_dir, "t")
    server = Server(data_dir, listen=("127.0.0.1", 0), idle_ms=30_000).__enter__()
    address = f"127.0.0.1:{server.port}"
    env = {"KLOG_DATA_DIR": str(tmp_path / "none"), "PYTHONPATH": REPO, "KLOG_CLUSTER_TIMEOUT": "2"}
    proc = subprocess.Popen([sys.executable, "-m", "klog", "consume", "t", "-f", "-b", address],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        first = proc.stdout.readline()  # type: ignore[union-attr]
        assert first == b"\n", first  # offset 0's value is null: an empty line
        server.close()
        stopped = time.monotonic()
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - stopped
    finally:
        server.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, err
    text = err.decode()
    assert text.count("\n") == 1 and "Traceback" not in text and address in text and "t-0" in text, text
    assert took < 12, took


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["SSL-client-certificate", "SASL_PLAINTEXT", "SASL_SSL"])
def test_tls_and_sasl_listeners_are_read_by_fetch_requests(secure_store, certs, protocol):  # noqa: F811
    values = produce(secure_store, "t")
    props: dict[str, str] = {}
    config: dict = {}
    if protocol == "SSL-client-certificate":
        protocol, config = "SSL", {"ssl_cafile": certs.ca, "ssl_client_auth": "required"}
        props = {"ssl.certificate.location": certs.path("alice.pem"), "ssl.key.location": certs.path("alice.key")}
    else:
        props = {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bob", "sasl.password": "bob-pw"}
    props["security.protocol"] = protocol
    if "SSL" in protocol:
        props["ssl.ca.location"] = certs.ca
    with serving(secure_store, certs, protocol, **config) as server:
        assert remote_values(server.addr[protocol], "t", props) == values


def test_kio_loads_without_hypothesis_and_hypothesis_still_imports():
    """load_kio hides hypothesis from kio's import only (a klog command's ~0.16 s), and kio works."""
    code = ("import sys\nfrom klog.protocol.loading import load_kio\nload_kio()\n"
            "from kio.static.primitive import i32\nimport kio.serial\nassert i32(5) == 5\n"
            "assert 'hypothesis' not in sys.modules and sys.modules.get('kio.static._phantom')\n"
            "import hypothesis\nprint('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, env={"PYTHONPATH": REPO}, timeout=60)
    assert (r.returncode, r.stdout) == (0, b"ok\n"), r.stderr


def test_old_message_formats_read_as_the_local_store_reads_them(kafka_server, data_dir, tmp_path):
    """Magic 0/1 message sets (plain, and gzip/snappy/lz4 wrappers) then a v2 batch, imported from
    a Kafka folder: the Fetch reader gives the local consumer's records, from the start and from
    inside a compressed wrapper."""
    from klog.broker.importer import import_dirs
    from tests.broker.test_kafka_files import _legacy_folder

    _legacy_folder(tmp_path / "k")
    with klog.open(data_dir) as s:
        import_dirs(s, [str(tmp_path / "k")])
    for start in ("beginning", "5"):
        with klog.open(data_dir, create=False) as s, s.consumer("old", start=start) as c:
            local = [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers) for r in c]
        with RemoteStore(ClusterTarget(kafka_server.bootstrap)) as store, store.consumer("old", start=start) as c:
            assert isinstance(c, FetchConsumer)
            remote = [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers) for r in c]
        assert remote == local and len(local) == (10 if start == "beginning" else 5), (start, local)


def test_a_lost_connection_is_opened_again_and_the_read_goes_on(kafka_server, data_dir, monkeypatch):
    values = produce(data_dir, "t")
    monkeypatch.setattr(fetch_consumer, "PARTITION_BYTES", 4000)
    with RemoteStore(ClusterTarget(kafka_server.bootstrap)) as store, store.consumer("t") as c:
        chunks = c.value_chunks()
        got = list(next(chunks))
        (broker,) = c._fetcher._brokers.values()
        broker.conn.sock.close()  # as a broker restart would: the next request fails on this socket
        got += [v for chunk in chunks for v in chunk]
        assert c._fetcher._brokers and broker not in c._fetcher._brokers.values()  # a new connection
    assert got == values


@pytest.mark.slow
def test_transaction_markers_are_skipped_and_read_committed_goes_by_librdkafka(kafka_server, data_dir, tmp_path,
                                                                                 klog_proc):
    """Control batches (COMMIT/ABORT markers) are not records: the Fetch reader leaves them out as
    the local reader does (read_uncommitted: aborted records included); read_committed, through
    librdkafka, stops at the open transaction and skips the aborted ones."""
    from klog.broker.importer import import_dirs
    from tests.broker.test_kafka_files import ALL_TXN_VALUES, COMMITTED_VALUES, _txn_folder

    _txn_folder(tmp_path / "k", with_txn_index=True)
    with klog.open(data_dir) as s:
        import_dirs(s, [str(tmp_path / "k")])
    with RemoteStore(ClusterTarget(kafka_server.bootstrap)) as store:
        with store.consumer("tx") as c:
            assert isinstance(c, FetchConsumer)
            assert [(r.offset, r.value.decode()) for r in c] == [
                (o, v) for o, v in zip((0, 1, 2, 3, 4, 6, 8, 9, 10), ALL_TXN_VALUES, strict=True)]
        with store.consumer("tx", isolation_level="read_committed") as c:
            assert [r.value.decode() for r in c] == COMMITTED_VALUES  # ends at the last stable offset
    for args in (["consume", "tx", "--json"], ["consume", "tx", "-X", "isolation.level=read_committed", "--json"]):
        remote, local = klog_proc(*args, "-b", kafka_server.bootstrap), klog_proc(*args)
        assert remote.returncode == local.returncode == 0, (args, remote.stderr)
        assert remote.stdout == local.stdout and local.stdout, args


def test_dash_x_client_id_names_klogs_own_requests():
    """-X client.id is the client id of klog's own requests (Fetch, OffsetDelete, ...) as it is of
    librdkafka's: broker quotas and logs go by it ('klog' without one)."""
    assert _client_id_sent({"client.id": "billing-reader"}) == "billing-reader"
    assert _client_id_sent({}) == "klog"


def _client_id_sent(props: dict[str, str]) -> str:
    """The client id in the header of a request klog's socket sends to a fake broker (which hangs
    up without answering: one error line)."""
    import socket
    import struct
    import threading

    from kio.schema.api_versions.v2.request import ApiVersionsRequest
    from kio.schema.api_versions.v2.response import ApiVersionsResponse

    from klog.client.remote import wire
    from klog.errors import KlogError

    got: list[str] = []
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def fake_broker() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(10)
                frame = b""
                while len(frame) < 4 or len(frame) < 4 + struct.unpack_from(">i", frame)[0]:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    frame += chunk
                (length,) = struct.unpack_from(">h", frame, 4 + 8)  # after api key, version, correlation id
                got.append(frame[14:14 + length].decode())

        thread = threading.Thread(target=fake_broker, daemon=True)
        thread.start()
        sec = wire.security(ClusterTarget(f"127.0.0.1:{port}", props))
        with wire.Connection("127.0.0.1", port, 5, sec) as conn, pytest.raises(KlogError, match="did not answer"):
            conn.call(ApiVersionsRequest(), ApiVersionsResponse)
        thread.join(10)
    assert len(got) == 1, got
    return got[0]


T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def served_mixed_topic(tmp_path_factory):
    """A 3-partition topic of five codecs' batches, null keys and values, headers (one with a
    null value), non-ASCII values, one timestamp per second; `klog serve` over it."""
    from klog.server import Server

    data = str(tmp_path_factory.mktemp("mixed") / "data")
    with klog.open(data) as s:
        s.create_topic("m", 3)
        i = 0
        for codec_name in ("none", "gzip", "snappy", "lz4", "zstd"):
            with s.producer(compression_type=codec_name, batch_size=600) as p:
                for _ in range(60):
                    key = None if i % 7 == 0 else b"k%d" % (i % 13)
                    value = None if i % 11 == 0 else f"v{i}-\u00e9".encode()
                    headers = [("h", b"x%d" % i), ("n", None)] if i % 5 == 0 else []
                    p.send("m", value, key=key, headers=headers, timestamp=T0 + i * 1000)
                    i += 1
    with Server(data, listen=("127.0.0.1", 0), idle_ms=30_000) as server:
        yield data, f"127.0.0.1:{server.port}"


@pytest.mark.parametrize("args", [
    ["--json"], [], ["-n", "5", "--json"], ["--tail", "3", "--json"], ["-o", "10", "--json"], ["-o", "-5", "--json"],
    ["--since", str(T0 + 100_000), "--until", str(T0 + 200_000), "--json"], ["-p", "1", "--json"],
    ["-p", "2", "-o", "7"], ["--format", "%p %o %k %s %T %h\\n"], ["-f", "-n", "20", "--json"],
    ["--last", "4", "--json"], ["-p", "1", "--tail", "2"], ["-o", "end", "--json"], ["--json", "-n", "1000"],
    ["-p", "9"], ["-o", "100000"],
], ids=lambda a: " ".join(a) or "values")
def test_consume_through_serve_prints_what_the_local_store_prints(served_mixed_topic, args):
    data, bootstrap = served_mixed_topic
    env = klog_env(data, KLOG_CLUSTER_TIMEOUT="5")
    local = subprocess.run([sys.executable, "-m", "klog", "consume", "m", *args], env=env, capture_output=True,
                           timeout=60)
    remote = subprocess.run([sys.executable, "-m", "klog", "consume", "m", *args, "-b", bootstrap], env=env,
                            capture_output=True, timeout=60)
    assert (remote.returncode, remote.stdout, remote.stderr) == (local.returncode, local.stdout, local.stderr)
    if args in (["--json"], []):
        assert len(local.stdout.splitlines()) == 300


def test_consume_from_an_unreachable_broker_is_one_line_within_the_timeout(data_dir):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    started = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "klog", "consume", "t", "-b", f"127.0.0.1:{port}"], capture_output=True,
                       text=True, env=klog_env(data_dir, KLOG_CLUSTER_TIMEOUT="2"), timeout=60)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and f"127.0.0.1:{port}" in r.stderr, r.stderr
    assert time.monotonic() - started < 10


@pytest.mark.slow
def test_a_topic_deleted_while_consume_b_follows_it_ends_in_one_line_exit_1(served_mixed_topic, tmp_path):
    """Locally: "topic 'm' was deleted while being followed" at once. Through a cluster: one line
    saying so and naming the partition once the metadata has not named the topic for a second
    (fetch.TOPIC_GONE_S), well before $KLOG_CLUSTER_TIMEOUT."""
    data, bootstrap = served_mixed_topic
    env = klog_env(data, KLOG_CLUSTER_TIMEOUT="30")
    with klog.open(data) as s:
        s.create_topic("gone", 1)
        with s.producer() as p:
            for i in range(10):
                p.send("gone", b"g%d" % i)
    proc = subprocess.Popen([sys.executable, "-m", "klog", "consume", "gone", "-f", "-b", bootstrap], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for i in range(10):
            assert proc.stdout.readline() == b"g%d\n" % i  # type: ignore[union-attr]
        deleted = run_klog(data, "topics", "delete", "gone", "--yes")
        assert deleted.returncode == 0, deleted.stderr
        gone_at = time.monotonic()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - gone_at
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = err.decode()
    assert proc.returncode == 1 and text.count("\n") == 1 and "gone-0" in text and "Traceback" not in text, text
    assert "was deleted while being read" in text and took < 15, (took, text)
    # the reader's leader lookups must not have created it again (librdkafka's admin handle is a
    # producer: its metadata lookup of one topic asks an auto-creating broker to create it)
    with klog.open(data) as s:
        assert not s.has_topic("gone")
