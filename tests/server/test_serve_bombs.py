"""Decompression bombs: a compressed batch whose records expand past the topic's max.message.bytes is
refused (MESSAGE_TOO_LARGE) when the bound is reached, before it is expanded further: a served
Produce of a few hundred KB cannot cost the server hundreds of MB."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from klog.store import compression
from tests.conftest import REPO
from tests.serve_helpers import RawClient, batch, gzip_bomb_batch, produce

MESSAGE_TOO_LARGE = 10


def test_a_bomb_is_refused_as_too_large_and_a_batch_within_max_message_bytes_is_taken(kafka_server, store):
    store.create_topic("small")
    store.create_topic("roomy", configs={"max.message.bytes": str(8 << 20)})
    bomb = gzip_bomb_batch(2, 3 << 20)  # 6 KB on the wire, 6 MiB of records
    with RawClient(kafka_server.port) as client:
        assert produce(client, "small", 0, bomb) == (MESSAGE_TOO_LARGE, -1)
        assert produce(client, "small", 0, batch([b"fine"])) == (0, 0)  # nothing of the bomb was written
        assert produce(client, "roomy", 0, bomb) == (0, 0)  # the topic allows 8 MiB


def _peak_rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def _start_server(data_dir: str, err_path: str) -> tuple[subprocess.Popen, int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": REPO, "KLOG_DATA_DIR": data_dir}
    with open(err_path, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "klog", "serve", "-l", f"127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=err, env=env)
    for _ in range(300):  # bounded: ~30 s
        with open(err_path, "rb") as f:
            if b"listening on" in f.read():
                return proc, port
        assert proc.poll() is None, open(err_path).read()
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("klog serve did not start")


@pytest.mark.slow
def test_bombs_sent_at_once_do_not_raise_the_servers_memory(data_dir, tmp_path):
    """Eight Produce requests at once, each a 120 KB gzip batch of 2 x 48 MiB records, to eight
    partitions (eight append threads): before the bound each expanded to 96 MiB in the server;
    now each stops at max.message.bytes. The server's peak RSS is measured (VmHWM)."""
    import klog

    with klog.open(data_dir) as store:
        store.create_topic("b", partitions=8)
    bomb = gzip_bomb_batch(2, 48 << 20)
    assert len(bomb) < 200_000
    proc, port = _start_server(data_dir, str(tmp_path / "serve.err"))
    try:
        with RawClient(port) as warm:  # the server's code paths loaded before the baseline
            assert produce(warm, "b", 0, batch([b"warm"]))[0] == 0
        before = _peak_rss_kb(proc.pid)
        codes: list[int] = []

        def send(partition: int) -> None:
            with RawClient(port) as client:
                client.sock.settimeout(60)
                codes.append(int(produce(client, "b", partition, bomb)[0]))

        threads = [threading.Thread(target=send, args=(p,)) for p in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        grown_mb = (_peak_rss_kb(proc.pid) - before) / 1024
        print(f"\nserver peak RSS grew {grown_mb:.0f} MB for 8 bombs of {len(bomb)} bytes (768 MiB of records)")
        assert codes == [MESSAGE_TOO_LARGE] * 8
        assert grown_mb < 100, f"peak RSS grew {grown_mb:.0f} MB"
    finally:
        proc.terminate()
        proc.wait(20)


def test_large_decompression_buffers_share_one_process_wide_budget(monkeypatch):
    """Buffers beyond the reused per-thread one come out of DECOMPRESSION_BYTES_IN_FLIGHT_MAX: with
    the budget at 12 MiB, four threads decompressing 10 MiB batches at once never hold more."""
    monkeypatch.setattr(compression, "budget", compression._Budget(12 << 20))
    data = compression.compress(compression.GZIP, bytes(10 << 20))
    out: list[int] = []
    threads = [threading.Thread(target=lambda: out.append(len(compression.decompress(
        compression.GZIP, data, limit=11 << 20)))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert out == [10 << 20] * 4
    assert compression.budget.used == 0
    assert 0 < compression.budget.peak <= 12 << 20


# -- klog dirs import ------------------------------------------------------------------------------
def test_dirs_import_refuses_a_segment_holding_a_bomb_and_creates_nothing(cli, store, tmp_path):
    import struct

    from tests.kafka_files import v2_batch, write_segment

    now = int(time.time() * 1000)
    bomb = bytearray(gzip_bomb_batch(2, 8 << 20))  # 16 MiB of records in ~16 KB
    struct.pack_into(">q", bomb, 0, 1)  # after the first batch (the base offset is outside the CRC)
    write_segment(str(tmp_path / "k" / "bombed-0"), 0, [v2_batch(0, [(None, b"first", now)]), bytes(bomb)])
    r = cli("dirs", "import", str(tmp_path / "k"))
    assert r.exit_code == 1, r.out + r.stderr
    assert "00000000000000000000.log: the batch at offset 1" in r.stderr and "decompression bomb" in r.stderr
    assert "nothing imported" in r.stderr and "Traceback" not in r.stderr
    assert not store.has_topic("bombed")


def test_dirs_import_takes_compressed_batches_larger_than_max_message_bytes_at_real_ratios(cli, store, tmp_path):
    """Kafka producers with a large batch.size write batches whose records pass 1 MiB once
    decompressed: real data (here 2:1) is imported, only bomb ratios are refused."""
    from tests.kafka_files import v2_batch, write_segment

    now = int(time.time() * 1000)
    values = [os.urandom(400_000).hex().encode() for _ in range(4)]  # 3.2 MB of records, ~1.6 MB gzip
    write_segment(str(tmp_path / "k" / "big-0"), 0, [v2_batch(0, [(None, v, now) for v in values], codec=1)])
    r = cli("dirs", "import", str(tmp_path / "k"))
    assert r.exit_code == 0, r.out + r.stderr
    assert "Imported big-0" in r.out
