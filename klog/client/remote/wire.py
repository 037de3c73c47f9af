"""Kafka requests confluent-kafka does not offer (OffsetDelete), framed with kio over one plain
socket: find the group's coordinator through the bootstrap servers, then ask it.

Plain TCP only: SSL and SASL need librdkafka's handshakes, so a cluster with another
security.protocol is refused in one line rather than half-supported.
"""

from __future__ import annotations

import io
import socket
import struct
import time
from typing import Any

from klog.errors import KlogError, UsageError

FIND_COORDINATOR_V = 1  # kept by every Kafka since 0.11 (4.0 dropped only v0); not flexible
RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
RETRY_PAUSE_S = 0.1
CLIENT_ID = "klog"


def check_plaintext(target) -> None:  # noqa: ANN001 - ClusterTarget
    protocol = target.properties.get("security.protocol", "PLAINTEXT")
    if protocol.upper() != "PLAINTEXT":
        raise UsageError(f"groups delete-offsets against a cluster speaks PLAINTEXT only, not security.protocol "
                         f"{protocol}; use kafka-consumer-groups --delete-offsets there")


class Connection:
    """One broker connection sending non-flexible kio requests (header v1, response header v0)."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.address = f"{host}:{port}"
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise KlogError(f"cannot reach Kafka broker {self.address}: {e.strerror or e}") from None
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, request: Any, response_type: type) -> Any:
        from kio.schema.request_header.v1.header import RequestHeader
        from kio.serial import entity_reader, entity_writer
        from kio.static.primitive import i16, i32

        self.correlation += 1
        buf = io.BytesIO()
        entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=i16(request.__api_key__),
                                                        request_api_version=i16(request.__version__),
                                                        correlation_id=i32(self.correlation), client_id=CLIENT_ID))
        entity_writer(type(request))(buf, request)
        frame = buf.getvalue()
        try:
            self.sock.sendall(struct.pack(">i", len(frame)) + frame)
            (size,) = struct.unpack(">i", self._exactly(4))
            answer = self._exactly(size)
        except OSError as e:
            raise KlogError(f"Kafka broker {self.address} did not answer: {e.strerror or e}") from None
        (correlation,) = struct.unpack_from(">i", answer)
        if correlation != self.correlation:
            raise KlogError(f"Kafka broker {self.address} answered another request ({correlation})")
        try:
            body, _ = entity_reader(response_type)(answer, 4)
        except Exception as e:  # noqa: BLE001 - kio's decode errors
            raise KlogError(f"cannot read the answer of Kafka broker {self.address}: {e}") from None
        return body

    def _exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError(0, "connection closed")
            out += chunk
        return bytes(out)


def _servers(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for s in bootstrap.split(","):
        host, _, port = s.strip().rpartition(":")
        out.append((host.strip("[]"), int(port)))
    return out


def find_coordinator(target, group: str, timeout: float) -> tuple[str, int]:  # noqa: ANN001 - ClusterTarget
    """(host, port) of the group's coordinator, asked of the bootstrap servers in turn."""
    from kio.schema.find_coordinator.v1.request import FindCoordinatorRequest
    from kio.schema.find_coordinator.v1.response import FindCoordinatorResponse
    from kio.static.primitive import i8

    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        for host, port in _servers(target.bootstrap):
            try:
                with Connection(host, port, timeout) as conn:
                    found = conn.call(FindCoordinatorRequest(key=group, key_type=i8(0)), FindCoordinatorResponse)
            except KlogError as e:
                last = str(e)
                continue
            code = int(found.error_code)
            if code == 0:
                return str(found.host), int(found.port)
            if code not in RETRIABLE:
                raise KlogError(f"cannot find the coordinator of group '{group}': {error_name(code)}")
            last = error_name(code)
        if time.monotonic() > deadline:
            raise KlogError(f"cannot find the coordinator of group '{group}' at {target.label} "
                            f"within {timeout:g} s: {last}")
        time.sleep(RETRY_PAUSE_S)


def offset_delete(target, group: str, topic: str, partitions: list[int],  # noqa: ANN001 - ClusterTarget
                  timeout: float) -> tuple[int, dict[int, int]]:
    """OffsetDelete at the group's coordinator: (top-level error code, partition -> error code)."""
    from kio.schema.offset_delete.v0.request import (
        OffsetDeleteRequest,
        OffsetDeleteRequestPartition,
        OffsetDeleteRequestTopic,
    )
    from kio.schema.offset_delete.v0.response import OffsetDeleteResponse
    from kio.static.primitive import i32

    check_plaintext(target)
    request = OffsetDeleteRequest(group_id=group, topics=(OffsetDeleteRequestTopic(
        name=topic, partitions=tuple(OffsetDeleteRequestPartition(partition_index=i32(p)) for p in partitions)),))
    deadline = time.monotonic() + timeout
    while True:
        host, port = find_coordinator(target, group, timeout)
        with Connection(host, port, timeout) as conn:
            answer = conn.call(request, OffsetDeleteResponse)
        code = int(answer.error_code)
        if code not in RETRIABLE or time.monotonic() > deadline:  # a moved coordinator: ask again
            return code, {int(p.partition_index): int(p.error_code) for t in answer.topics for p in t.partitions}
        time.sleep(RETRY_PAUSE_S)


def error_name(code: int) -> str:
    """Kafka's name of an error code (GROUP_ID_NOT_FOUND), for one error line."""
    from kio.schema.errors import ErrorCode

    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error code {code}"


def partition_sizes(target, brokers: dict[int, tuple[str, int]],  # noqa: ANN001 - ClusterTarget
                    timeout: float) -> dict[tuple[str, int], dict[int, int]]:
    """DescribeLogDirs v1 (every topic) at each broker: (topic, partition) -> broker id -> bytes on
    disk (a replica being moved, `is_future_key`, not counted twice). A broker
    that cannot be asked (TLS/SASL, unreachable, refused) is left out: its replicas' sizes are unknown."""
    from kio.schema.describe_log_dirs.v1.request import DescribeLogDirsRequest
    from kio.schema.describe_log_dirs.v1.response import DescribeLogDirsResponse

    out: dict[tuple[str, int], dict[int, int]] = {}
    if target.properties.get("security.protocol", "PLAINTEXT").upper() != "PLAINTEXT":
        return out
    for broker, (host, port) in brokers.items():
        try:
            with Connection(host, port, timeout) as conn:
                answer = conn.call(DescribeLogDirsRequest(topics=None), DescribeLogDirsResponse)
        except KlogError:
            continue
        for result in answer.results:
            if int(result.error_code):
                continue
            for t in result.topics:
                for p in t.partitions:
                    if p.is_future_key:
                        continue
                    sizes = out.setdefault((str(t.name), int(p.partition_index)), {})
                    # one replica per broker in Kafka; klog serve lists one per log dir holding one
                    sizes[broker] = max(sizes.get(broker, 0), int(p.partition_size))
    return out
