"""Idempotence with lost acknowledgements: a proxy between librdkafka and klog serve cuts the
connection after the server appended a batch but before its answer reaches the producer. The
producer retries the same sequence numbers; the log must hold every record exactly once."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

import klog
from klog.server import Server

ck = pytest.importorskip("confluent_kafka")


def hang_up(*socks: socket.socket) -> None:
    """Shut down, then close: shutdown wakes another thread's recv on the socket, close alone does not."""
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


class CuttingProxy:
    """Forwards 127.0.0.1:port -> the server; drops the connection instead of relaying the answer to
    every `cut_every`-th Produce request (api key 0), up to `cuts` times."""

    def __init__(self, target_port: int, cut_every: int = 3, cuts: int = 4) -> None:
        self.target_port = target_port
        self.cut_every, self.cuts_left = cut_every, cuts
        self.cuts_done = 0
        self.produces = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.socks: list[socket.socket] = []
        self._spawn(self._accept)

    def _spawn(self, fn, *args) -> None:  # noqa: ANN001
        t = threading.Thread(target=fn, args=args, daemon=True)
        t.start()
        self.threads.append(t)

    def _accept(self) -> None:
        self.listener.settimeout(0.2)
        while not self.stop.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:  # the server is stopping (the test's end): the client sees a close
                client.close()
                continue
            self.socks += [client, server]
            pending: list[int] = []  # correlation ids of produce requests to cut, in order
            self._spawn(self._upstream, client, server, pending)
            self._spawn(self._downstream, server, client, pending)

    @staticmethod
    def _frame(sock: socket.socket) -> bytes | None:
        head = b""
        while len(head) < 4:
            chunk = sock.recv(4 - len(head))
            if not chunk:
                return None
            head += chunk
        (size,) = struct.unpack(">i", head)
        body = b""
        while len(body) < size:
            chunk = sock.recv(min(65536, size - len(body)))
            if not chunk:
                return None
            body += chunk
        return head + body

    def _upstream(self, client: socket.socket, server: socket.socket, pending: list[int]) -> None:
        try:
            while (frame := self._frame(client)) is not None:
                api_key, _, corr = struct.unpack_from(">hhi", frame, 4)
                if api_key == 0:
                    with self.lock:
                        self.produces += 1
                        if self.cuts_left and self.produces % self.cut_every == 0:
                            self.cuts_left -= 1
                            pending.append(corr)
                server.sendall(frame)
        except OSError:
            pass
        finally:
            hang_up(client, server)

    def _downstream(self, server: socket.socket, client: socket.socket, pending: list[int]) -> None:
        try:
            while (frame := self._frame(server)) is not None:
                (corr,) = struct.unpack_from(">i", frame, 4)
                if corr in pending:  # the append happened; its acknowledgement is lost
                    with self.lock:
                        self.cuts_done += 1
                    break
                client.sendall(frame)
        except OSError:
            pass
        finally:
            hang_up(client, server)

    def close(self) -> None:
        self.stop.set()
        self.listener.close()
        hang_up(*self.socks)
        for t in self.threads:
            t.join(5)


def test_retries_after_lost_acknowledgements_write_each_record_once(data_dir):
    proxy = CuttingProxy(target_port=0)
    acked: list[bytes] = []
    failed: list[bytes] = []
    try:
        # clients reach the broker through the proxy: metadata names the proxy (--advertised-listener)
        with Server(data_dir, listen=("127.0.0.1", 0), advertised=("127.0.0.1", proxy.port)) as server:
            proxy.target_port = server.port
            server.store.create_topic("lost")
            producer = ck.Producer({"bootstrap.servers": f"127.0.0.1:{proxy.port}", "enable.idempotence": True,
                                    "acks": "all", "linger.ms": 1, "batch.num.messages": 50,
                                    "max.in.flight.requests.per.connection": 1, "message.timeout.ms": 30000,
                                    "reconnect.backoff.ms": 20, "retry.backoff.ms": 20})
            for i in range(1000):
                producer.produce("lost", b"m-%04d" % i,
                                 on_delivery=lambda e, m: (failed if e else acked).append(m.value()))
                if i % 50 == 49:
                    producer.poll(0)
                    time.sleep(0.01)
            assert producer.flush(30) == 0
    finally:
        proxy.close()
    assert proxy.cuts_done >= 2  # acknowledgements really were lost
    assert failed == [] and len(acked) == 1000
    with klog.open(data_dir) as store:
        stored = [r.value for r in store.consumer("lost")]
    assert stored == [b"m-%04d" % i for i in range(1000)]  # each once, in order
