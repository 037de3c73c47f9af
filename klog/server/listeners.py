"""The listeners of `klog serve` and what its security options say: each listener's Kafka security
protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), the TLS files, the SASL mechanisms, and the
principal a client certificate names (mutual TLS)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from klog.errors import UsageError
from klog.security.scram import MECHANISMS as SCRAM_MECHANISMS

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
AUTH_FAILURE_DELAY_MS_DEFAULT = 1000  # Kafka's connection.failed.authentication.delay.ms is 100


@dataclass(frozen=True)
class Listener:
    protocol: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.protocol}://{host}:{self.port}"


def parse_listener(text: str) -> Listener:
    """'SASL_SSL://0.0.0.0:9093', 'PLAINTEXT://:9092' or 'HOST:PORT' (PLAINTEXT) -> Listener."""
    from klog.server.server import parse_hostport

    protocol, sep, address = text.partition("://")
    if not sep:
        protocol, address = "PLAINTEXT", text
    protocol = protocol.upper()
    if protocol not in PROTOCOLS:
        raise UsageError(f"--listen: unknown security protocol {protocol!r} in '{text}' "
                         f"(one of {', '.join(PROTOCOLS)})")
    try:
        host, port = parse_hostport(address)
    except ValueError as e:
        raise UsageError(f"--listen: {e}") from None
    return Listener(protocol, host, port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class SecurityConfig:
    """What `klog serve`'s security options say (the defaults: one PLAINTEXT loopback listener)."""

    listeners: list[Listener] = field(default_factory=list)
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_cafile: str | None = None  # CAs trusted for client certificates
    ssl_client_auth: str = "none"  # none | requested | required (Kafka's ssl.client.auth)
    sasl_mechanisms: tuple[str, ...] = SASL_MECHANISMS
    insecure: bool = False  # allow a non-loopback listener without TLS (PLAINTEXT or SASL_PLAINTEXT)
    auth_failure_delay_ms: int = AUTH_FAILURE_DELAY_MS_DEFAULT
    quota_window_ms: int = 1000
    quota_samples: int = 11

    def validate(self) -> None:
        """Refuse a configuration that would serve less safely than it looks (exit 2)."""
        for lst in self.listeners:
            if lst.tls and not (self.ssl_certfile and self.ssl_keyfile):
                raise UsageError(f"listener {lst} needs --ssl-cert and --ssl-key")
            if not lst.tls and not is_loopback(lst.host) and not self.insecure:
                if lst.sasl:  # passwords (PLAIN) and everything after them cross the network in clear
                    raise UsageError(f"listener {lst} would take passwords from other machines unencrypted; "
                                     "use SASL_SSL, or --insecure to allow it")
                raise UsageError(f"listener {lst} is reachable from other machines without TLS or SASL; "
                                 "use SASL_SSL (or SSL), or --insecure to allow it")
        if self.ssl_client_auth not in ("none", "requested", "required"):
            raise UsageError("--ssl-client-auth must be none, requested or required")
        if self.ssl_client_auth != "none" and not self.ssl_cafile:
            raise UsageError("--ssl-client-auth needs --ssl-ca (the CA that signs client certificates)")
        for m in self.sasl_mechanisms:
            if m not in SASL_MECHANISMS:
                raise UsageError(f"unknown SASL mechanism {m!r} (one of {', '.join(SASL_MECHANISMS)})")
        if len({(lst.host, lst.port) for lst in self.listeners if lst.port}) < len([x for x in self.listeners
                                                                                   if x.port]):
            raise UsageError("two listeners on the same address")

    def warnings(self) -> list[str]:
        return [f"listener {lst} accepts " + ("passwords in clear text" if lst.sasl else "unauthenticated, "
                "unencrypted connections") + " from other machines (--insecure)"
                for lst in self.listeners if not lst.tls and not is_loopback(lst.host)]


def principal_from_cert(cert: dict | None) -> str | None:
    """Kafka's default SSL principal: 'User:' + the subject's distinguished name (RFC 2253 order,
    most specific first: 'User:CN=alice,OU=eng,O=acme')."""
    if not cert or "subject" not in cert:
        return None
    names = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O", "localityName": "L",
             "stateOrProvinceName": "ST", "countryName": "C", "emailAddress": "EMAILADDRESS",
             "domainComponent": "DC", "streetAddress": "STREET", "userId": "UID"}
    parts = []
    for rdn in reversed(cert["subject"]):
        parts.append("+".join(f"{names.get(k, k)}={_escape_dn(v)}" for k, v in rdn))
    return "User:" + ",".join(parts) if parts else None


def _escape_dn(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    return out[:-1] + "\\ " if out.endswith(" ") else out
