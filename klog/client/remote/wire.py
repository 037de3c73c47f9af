"""Kafka requests confluent-kafka does not offer (OffsetDelete, DescribeLogDirs), framed with kio over
one socket: find the group's coordinator through the bootstrap servers, then ask it.

The socket honours the librdkafka properties a user gives with -X, so these calls reach the same
clusters the rest of klog does: `security.protocol` PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL;
TLS with `ssl.ca.location` (or `ssl.ca.pem`; the system CAs otherwise), a client certificate
(`ssl.certificate.location`, `ssl.key.location`, `ssl.key.password`),
`ssl.endpoint.identification.algorithm` (https, the default, or none) and
`enable.ssl.certificate.verification`; SASL (SaslHandshake v1 + SaslAuthenticate v1) with
`sasl.mechanism(s)` PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 and `sasl.username`/`sasl.password`.
Anything else librdkafka would need (GSSAPI, OAUTHBEARER) is refused in one line.
"""

from __future__ import annotations

import io
import socket
import ssl
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from klog.errors import KlogError, ScramError, SecurityError, UsageError
from klog.protocol.apis import api_name
from klog.protocol.errors import error_name
from klog.protocol.loading import load_kio
from klog.protocol.walk import ArrayPastFrame, check_arrays

# The largest answer read (librdkafka's receive.message.max.bytes default), or a Fetch's own
# max_bytes and this slack when it asks for more: a size past it is refused before any allocation
ANSWER_BYTES_MAX = 100_000_000
ANSWER_SLACK_BYTES = 1 << 20

FIND_COORDINATOR_V = 1  # kept by every Kafka since 0.11 (4.0 dropped only v0); not flexible
RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
RETRY_PAUSE_S = 0.1
CLIENT_ID = "klog"  # unless -X client.id names another (quotas and broker logs go by it)
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class MalformedAnswer(KlogError):
    """A broker's answer that cannot be what it claims (an array of more entries than its bytes):
    not retried, a broker sending it is broken or not a Kafka broker."""


@dataclass(frozen=True)
class Security:
    """How to open a broker connection: TLS context (or None) and SASL mechanism/credentials."""

    tls: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = field(default="", repr=False)  # never in a repr or a log line
    client_id: str = CLIENT_ID


def security(target) -> Security:  # noqa: ANN001 - ClusterTarget
    """The connection settings target's -X properties ask for; UsageError (one line) for what this
    socket path cannot do, naming the property."""
    props = target.properties
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise UsageError(f"unknown security.protocol '{props['security.protocol']}' (one of {', '.join(PROTOCOLS)})")
    tls = _tls_context(props) if protocol.endswith("SSL") else None
    if not protocol.startswith("SASL"):
        return Security(tls, client_id=props.get("client.id", CLIENT_ID))
    mechanism = (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "GSSAPI").upper()
    if mechanism not in SASL_MECHANISMS:
        raise UsageError(f"sasl.mechanism {mechanism} is not supported for this request (klog speaks "
                         f"{', '.join(SASL_MECHANISMS)} here)")
    if "sasl.username" not in props or "sasl.password" not in props:
        raise UsageError(f"security.protocol {protocol} needs -X sasl.username=... and -X sasl.password=...")
    return Security(tls, mechanism, props["sasl.username"], props["sasl.password"],
                    props.get("client.id", CLIENT_ID))


def _tls_context(props: dict[str, str]) -> ssl.SSLContext:
    import os

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        ca = props.get("ssl.ca.location")
        if props.get("ssl.ca.pem"):
            context.load_verify_locations(cadata=props["ssl.ca.pem"])
        elif ca and ca != "probe":
            context.load_verify_locations(capath=ca) if os.path.isdir(ca) else context.load_verify_locations(cafile=ca)
        else:
            context.load_default_certs()
        cert = props.get("ssl.certificate.location")
        if cert:
            context.load_cert_chain(cert, props.get("ssl.key.location"), props.get("ssl.key.password"))
    except (OSError, ssl.SSLError) as e:
        raise UsageError(f"cannot load the TLS files named by -X ssl.*: {e.strerror or e}") from None
    for name in ("ssl.certificate.pem", "ssl.key.pem", "ssl.keystore.location"):
        if props.get(name):
            raise UsageError(f"-X {name} is not supported for this request; use ssl.certificate.location "
                             "and ssl.key.location")
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https").lower()
    if algorithm not in ("https", "none"):
        raise UsageError(f"invalid ssl.endpoint.identification.algorithm '{algorithm}' (https or none)")
    context.check_hostname = algorithm == "https"
    if props.get("enable.ssl.certificate.verification", "true").lower() in ("false", "0"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class Connection:
    """One broker connection (TLS and SASL as `sec` says) sending kio requests with the headers their
    schema names (v1 and response v0; v2 and response v1 for flexible versions)."""

    def __init__(self, host: str, port: int, timeout: float, sec: Security | None = None) -> None:
        self.address = f"{host}:{port}"
        load_kio()  # every kio request goes through a Connection
        sec = sec or Security()
        self.client_id = sec.client_id
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise KlogError(f"cannot reach Kafka broker {self.address}: {e.strerror or e}") from None
        self.correlation = 0
        try:
            if sec.tls is not None:
                try:
                    self.sock = sec.tls.wrap_socket(self.sock, server_hostname=host)
                except (OSError, ssl.SSLError) as e:
                    raise SecurityError(f"TLS handshake with Kafka broker {self.address} failed: "
                                    f"{getattr(e, 'reason', None) or e}") from None
            if sec.mechanism is not None:
                self._authenticate(sec)
        except BaseException:
            self.sock.close()
            raise

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _authenticate(self, sec: Security) -> None:
        """SaslHandshake v1, then the mechanism's SaslAuthenticate v1 rounds (PLAIN: one; SCRAM: two)."""
        from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
        from kio.schema.sasl_authenticate.v1.response import SaslAuthenticateResponse
        from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
        from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse

        assert sec.mechanism is not None
        shake = self.call(SaslHandshakeRequest(mechanism=sec.mechanism), SaslHandshakeResponse)
        if int(shake.error_code):
            raise SecurityError(f"Kafka broker {self.address} does not offer SASL mechanism {sec.mechanism} "
                            f"(it offers {', '.join(map(str, shake.mechanisms)) or 'none'})")

        def round_trip(auth_bytes: bytes) -> bytes:
            answer = self.call(SaslAuthenticateRequest(auth_bytes=auth_bytes), SaslAuthenticateResponse)
            if int(answer.error_code):
                raise SecurityError(f"SASL authentication failed at Kafka broker {self.address} ({sec.mechanism}, "
                                f"user {sec.username}): {answer.error_message or error_name(int(answer.error_code))}")
            return bytes(answer.auth_bytes)

        if sec.mechanism == "PLAIN":
            round_trip(b"\0" + sec.username.encode() + b"\0" + sec.password.encode())
            return
        from klog.security.scram import ScramClient

        scram = ScramClient(sec.mechanism, sec.username, sec.password)
        try:
            server_final = round_trip(scram.final(round_trip(scram.first())))
            proven = scram.verify(server_final)
        except (ScramError, KeyError, ValueError):
            proven = False
        if not proven:  # the broker could not prove it knows the credential: not the cluster we meant
            raise SecurityError(f"SASL authentication failed at Kafka broker {self.address}: the broker's SCRAM "
                            "answer does not prove it holds the credential")

    def call(self, request: Any, response_type: type) -> Any:
        from kio.serial import entity_reader, entity_writer
        from kio.static.primitive import i16, i32

        self.correlation += 1
        buf = io.BytesIO()
        header = type(request).__header_schema__  # v1, or v2 (tagged fields) for a flexible request
        entity_writer(header)(buf, header(request_api_key=i16(request.__api_key__),
                                                        request_api_version=i16(request.__version__),
                                                        correlation_id=i32(self.correlation), client_id=self.client_id))
        entity_writer(type(request))(buf, request)
        frame = buf.getvalue()
        try:
            self.sock.sendall(struct.pack(">i", len(frame)) + frame)
            (size,) = struct.unpack(">i", self._exactly(4))
            if size < 4:  # (no room for a correlation id; a negative size is no size at all)
                raise self._malformed(request, f"a frame of {size} bytes")
            bound = max(ANSWER_BYTES_MAX, int(getattr(request, "max_bytes", 0)) + ANSWER_SLACK_BYTES)
            if size > bound:  # (read as it claims, it would be allocated whole, then waited for)
                raise self._malformed(request, f"a frame of {size} bytes (klog reads at most {bound})")
            answer = self._exactly(size)
        except OSError as e:
            raise KlogError(f"Kafka broker {self.address} did not answer: {e.strerror or e}") from None
        (correlation,) = struct.unpack_from(">i", answer)
        if correlation != self.correlation:
            raise KlogError(f"Kafka broker {self.address} answered another request ({correlation})")
        header = response_type.__header_schema__  # v0, or v1 with tagged fields
        try:
            # before kio reads it: its reader reserves room for every entry an array claims (2**32
            # of them abort the process), so an array claiming more than the bytes left is refused
            check_arrays(answer, 0, header, response_type)
        except ArrayPastFrame as e:
            raise self._malformed(request, str(e)) from None
        try:
            view = memoryview(answer).toreadonly()
            _, start = entity_reader(header)(view, 0)  # v0, or v1 with tagged fields
            body, _ = entity_reader(response_type)(view, start)
        except Exception as e:  # noqa: BLE001 - kio's decode errors
            raise KlogError(f"cannot read the answer of Kafka broker {self.address}: {e}") from None
        return body

    def _malformed(self, request: Any, why: str) -> MalformedAnswer:
        return MalformedAnswer(f"Kafka broker {self.address} sent a malformed {api_name(request.__api_key__)} "
                               f"answer: {why}")

    def _exactly(self, n: int) -> bytearray:
        """n bytes received straight into one buffer (no chunk list, no join: Fetch answers are
        megabytes)."""
        out = bytearray(n)
        view, got = memoryview(out), 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if not k:
                raise ConnectionError(0, "connection closed")
            got += k
        return out


def _servers(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for s in bootstrap.split(","):
        host, _, port = s.strip().rpartition(":")
        out.append((host.strip("[]"), int(port)))
    return out


GROUP, TRANSACTION = 0, 1  # FindCoordinator's key types
NOT_AUTHORIZED = {30: "Group", 53: "TransactionalId"}  # GROUP_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def find_coordinator(target, group: str, timeout: float,  # noqa: ANN001 - ClusterTarget
                     key_type: int = GROUP) -> tuple[str, int]:
    """(host, port) of the coordinator of a group (or, key_type TRANSACTION, of a transactional id),
    asked of the bootstrap servers in turn."""
    load_kio()
    from kio.schema.find_coordinator.v1.request import FindCoordinatorRequest
    from kio.schema.find_coordinator.v1.response import FindCoordinatorResponse
    from kio.static.primitive import i8

    sec = security(target)
    what = "group" if key_type == GROUP else "transactional id"
    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        for host, port in _servers(target.bootstrap):
            try:
                with Connection(host, port, timeout, sec) as conn:
                    found = conn.call(FindCoordinatorRequest(key=group, key_type=i8(key_type)),
                                      FindCoordinatorResponse)
            except SecurityError:
                raise
            except KlogError as e:
                last = str(e)
                continue
            code = int(found.error_code)
            if code == 0:
                return str(found.host), int(found.port)
            if code in NOT_AUTHORIZED:
                raise KlogError(f"{what} '{group}': not authorized at {target.label} ({error_name(code)}: "
                                f"Describe on the {NOT_AUTHORIZED[code]} is needed)")
            if code not in RETRIABLE:
                raise KlogError(f"cannot find the coordinator of {what} '{group}': {error_name(code)}")
            last = error_name(code)
        if time.monotonic() > deadline:
            raise KlogError(f"cannot find the coordinator of {what} '{group}' at {target.label} "
                            f"within {timeout:g} s: {last}")
        time.sleep(RETRY_PAUSE_S)


def offset_delete(target, group: str, topic: str, partitions: list[int],  # noqa: ANN001 - ClusterTarget
                  timeout: float) -> tuple[int, dict[int, int]]:
    """OffsetDelete at the group's coordinator: (top-level error code, partition -> error code)."""
    load_kio()
    from kio.schema.offset_delete.v0.request import (
        OffsetDeleteRequest,
        OffsetDeleteRequestPartition,
        OffsetDeleteRequestTopic,
    )
    from kio.schema.offset_delete.v0.response import OffsetDeleteResponse
    from kio.static.primitive import i32

    sec = security(target)
    request = OffsetDeleteRequest(group_id=group, topics=(OffsetDeleteRequestTopic(
        name=topic, partitions=tuple(OffsetDeleteRequestPartition(partition_index=i32(p)) for p in partitions)),))
    deadline = time.monotonic() + timeout
    while True:
        host, port = find_coordinator(target, group, timeout)
        with Connection(host, port, timeout, sec) as conn:
            answer = conn.call(request, OffsetDeleteResponse)
        code = int(answer.error_code)
        if code not in RETRIABLE or time.monotonic() > deadline:  # a moved coordinator: ask again
            return code, {int(p.partition_index): int(p.error_code) for t in answer.topics for p in t.partitions}
        time.sleep(RETRY_PAUSE_S)


def partition_sizes(target, brokers: dict[int, tuple[str, int]],  # noqa: ANN001 - ClusterTarget
                    timeout: float) -> dict[tuple[str, int], dict[int, int]]:
    """DescribeLogDirs v1 (every topic) at each broker: (topic, partition) -> broker id -> bytes on
    disk (a replica being moved, `is_future_key`, not counted twice). A broker that cannot be asked
    (unreachable, refused, a security setting this socket cannot speak) is left out: its replicas'
    sizes are unknown."""
    load_kio()
    from kio.schema.describe_log_dirs.v1.request import DescribeLogDirsRequest
    from kio.schema.describe_log_dirs.v1.response import DescribeLogDirsResponse

    out: dict[tuple[str, int], dict[int, int]] = {}
    try:
        sec = security(target)
    except UsageError:
        return out
    for broker, (host, port) in brokers.items():
        try:
            with Connection(host, port, timeout, sec) as conn:
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
