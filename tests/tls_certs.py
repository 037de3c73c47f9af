"""Test certificates made with the `openssl` CLI: a CA, a server certificate for 127.0.0.1 and
localhost, client certificates (signed, expired, and one from another CA)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass


def _openssl(*args: str, cwd: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _key_and_csr(cwd: str, name: str, subject: str) -> None:
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", subject, cwd=cwd)


def _sign(cwd: str, name: str, ca: str, days: int, ext: str | None = None) -> None:
    args = ["x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", str(days)]
    if ext:
        with open(os.path.join(cwd, f"{name}.ext"), "w") as f:
            f.write(ext)
        args += ["-extfile", f"{name}.ext"]
    _openssl(*args, cwd=cwd)


def _ca(cwd: str, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem",
             "-days", "2", "-subj", f"/CN={name}", cwd=cwd)


@dataclass
class Certs:
    dir: str

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    @property
    def ca(self) -> str:
        return self.path("ca.pem")


def make_certs(directory: str) -> Certs:
    """ca.pem; server.pem/key (CN=localhost, SAN 127.0.0.1); alice.pem/key (CN=alice,O=acme);
    expired.pem/key; stranger.pem/key signed by another CA (other-ca.pem)."""
    os.makedirs(directory, exist_ok=True)
    _ca(directory, "ca")
    _ca(directory, "other-ca")
    _key_and_csr(directory, "server", "/CN=localhost")
    _sign(directory, "server", "ca", 2, "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _key_and_csr(directory, "alice", "/O=acme/CN=alice")
    _sign(directory, "alice", "ca", 2)
    _key_and_csr(directory, "expired", "/O=acme/CN=old")
    _sign(directory, "expired", "ca", -1)  # notAfter a day before notBefore: expired from the start
    _key_and_csr(directory, "stranger", "/O=evil/CN=mallory")
    _sign(directory, "stranger", "other-ca", 2)
    return Certs(directory)
