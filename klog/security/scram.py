"""SCRAM server side (RFC 5802, RFC 7677): SCRAM-SHA-256 and SCRAM-SHA-512 as Kafka speaks them.

Only salted credentials are stored (salt, iterations, StoredKey, ServerKey), never the password:
StoredKey lets the server check a client's proof, ServerKey lets it prove itself back, and neither
lets anyone log in without the password (RFC 5802 section 9).

Exchange (one `ScramServer` per connection):
  client-first  "n,,n=<user>,r=<client nonce>"      -> server-first "r=<nonce>,s=<salt>,i=<iterations>"
  client-final  "c=biws,r=<nonce>,p=<proof>"          -> server-final "v=<server signature>"
An unknown user gets a decoy credential (decoy_credential): a salt and keys derived from the
store's secret, the same at every attempt as a real user's are, so the exchange looks the same and
fails at the proof; and every exchange derives a decoy, known user or not, so both cost the same.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from klog.errors import ScramError

# Kafka's mechanisms -> hashlib names. SHA-1 is RFC 5802's own test vector, not offered to clients.
MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_HASHES = {**MECHANISMS, "SCRAM-SHA-1": "sha1"}
ITERATIONS_DEFAULT = 4096  # kafka-configs.sh default and ScramMechanism minimum
ITERATIONS_MIN = 4096
ITERATIONS_MAX = 16384  # Kafka's upper bound
SALT_BYTES = 32
NONCE_BYTES = 24
MESSAGE_BYTES_MAX = 4096  # a SCRAM message is a few hundred bytes; refuse anything larger unparsed


@dataclass(frozen=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_json(self) -> dict:
        b64 = base64.b64encode
        return {"mechanism": self.mechanism, "salt": b64(self.salt).decode(), "iterations": self.iterations,
                "stored_key": b64(self.stored_key).decode(), "server_key": b64(self.server_key).decode()}

    @classmethod
    def from_json(cls, doc: dict) -> ScramCredential:
        b = base64.b64decode
        return cls(doc["mechanism"], b(doc["salt"]), int(doc["iterations"]), b(doc["stored_key"]),
                   b(doc["server_key"]))


def _hmac(hash_name: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


def _keys(hash_name: str, salted_password: bytes) -> tuple[bytes, bytes, bytes]:
    """(ClientKey, StoredKey, ServerKey) from SaltedPassword (RFC 5802 section 3)."""
    client_key = _hmac(hash_name, salted_password, b"Client Key")
    stored_key = hashlib.new(hash_name, client_key).digest()
    server_key = _hmac(hash_name, salted_password, b"Server Key")
    return client_key, stored_key, server_key


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    hash_name = _HASHES[mechanism]
    # SASLprep (RFC 4013) is not applied; Kafka's Java client does not apply it either
    return hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)


def make_credential(mechanism: str, password: str, salt: bytes | None = None,
                    iterations: int = ITERATIONS_DEFAULT) -> ScramCredential:
    """The stored form of `password` for `mechanism` (a fresh random salt unless given)."""
    if mechanism not in _HASHES:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    _, stored_key, server_key = _keys(_HASHES[mechanism], salted_password(mechanism, password, salt, iterations))
    return ScramCredential(mechanism, salt, iterations, stored_key, server_key)


def credential_from_salted(mechanism: str, salt: bytes, iterations: int, salted: bytes) -> ScramCredential:
    """The stored form from a SaltedPassword a client computed (AlterUserScramCredentials sends
    that, never the password)."""
    _, stored_key, server_key = _keys(_HASHES[mechanism], salted)
    return ScramCredential(mechanism, salt, iterations, stored_key, server_key)


def decoy_credential(secret: bytes, mechanism: str, user: str) -> ScramCredential:
    """The credential an unknown user (or one without `mechanism`) is answered with: salt and keys
    derived from `secret` (the store's, CredentialsMeta.decoy_secret) and the name, so the salt is
    the same at every attempt, as a real user's is, and nobody without the secret can tell it from
    one (a salt computed from the name alone told an attacker which names were not users). No
    password matches its keys. Kafka's own default iteration count: what most users have."""
    hash_name = _HASHES[mechanism]

    def derive(label: str) -> bytes:
        return _hmac(hash_name, secret, f"{label}\0{mechanism}\0{user}".encode())

    return ScramCredential(mechanism, derive("salt")[:SALT_BYTES], ITERATIONS_DEFAULT, derive("stored key"),
                           derive("server key"))


# the decoy secret of a ScramServer given none (tests, tools): stable for the process's life only
_PROCESS_SECRET = secrets.token_bytes(32)


def check_password(credential: ScramCredential, password: str) -> bool:
    """Whether `password` is the one `credential` was made from (SASL/PLAIN checks against these)."""
    hash_name = _HASHES[credential.mechanism]
    _, stored_key, _ = _keys(hash_name, salted_password(credential.mechanism, password, credential.salt,
                                                        credential.iterations))
    return hmac.compare_digest(stored_key, credential.stored_key)


def _attributes(message: str) -> dict[str, str]:
    """`a=1,b=2` -> {'a': '1', 'b': '2'}; an attribute is one letter (RFC 5802 section 5)."""
    out: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=" or not part[0].isalpha():
            raise ScramError("malformed SCRAM message")
        out.setdefault(part[0], part[2:])
    return out


def _decode_username(name: str) -> str:
    """RFC 5802 saslname: ',' is sent as '=2C' and '=' as '=3D'; any other '=' is malformed."""
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ScramError("malformed SCRAM user name")
    return name.replace("=2C", ",").replace("=3D", "=")


def _text(message: bytes) -> str:
    if len(message) > MESSAGE_BYTES_MAX:
        raise ScramError("SCRAM message too long")
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("SCRAM message is not UTF-8") from None


class ScramServer:
    """One SCRAM exchange: `first(client_first)`, then `final(client_final)`; `username` once done."""

    def __init__(self, mechanism: str, lookup: Callable[[str], ScramCredential | None],
                 nonce: str | None = None, decoy_secret: bytes | None = None) -> None:
        if mechanism not in _HASHES:
            raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
        self.mechanism = mechanism
        self.hash_name = _HASHES[mechanism]
        self._lookup = lookup
        self._decoy_secret = decoy_secret if decoy_secret is not None else _PROCESS_SECRET
        self._server_nonce = nonce if nonce is not None else secrets.token_urlsafe(NONCE_BYTES)
        self._state = "first"
        self._user: str | None = None
        self._credential: ScramCredential | None = None
        self._auth_prefix = ""
        self._nonce = ""
        self.username: str | None = None  # set only after a successful final()
        self.claimed_user: str | None = None  # the name the client gave (for logs), checked or not

    def first(self, client_first: bytes) -> bytes:
        if self._state != "first":
            raise ScramError("SCRAM client-first message out of order")
        self._state = "failed"
        text = _text(client_first)
        gs2, sep, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep or not sep2 or gs2 not in ("n", "y") or (authzid and not authzid.startswith("a=")):
            raise ScramError("malformed SCRAM client-first message (channel binding is not supported)")
        attrs = _attributes(bare)
        if "n" not in attrs or "r" not in attrs or "m" in attrs or not attrs["r"]:
            raise ScramError("malformed SCRAM client-first message")
        user = _decode_username(attrs["n"])
        self.claimed_user = user
        if authzid and _decode_username(authzid[2:]) != user:
            raise ScramError("SCRAM authorization id differs from the user name")
        credential = self._lookup(user)
        # derived for every user, known or not: the two paths do the same work (no timing tells them apart)
        decoy = decoy_credential(self._decoy_secret, self.mechanism, user)
        if credential is None or credential.mechanism != self.mechanism:
            credential, self._user = decoy, None  # same shape of answer; fails at the proof
        else:
            self._user = user
        self._credential = credential
        self._nonce = attrs["r"] + self._server_nonce
        server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                        f"i={credential.iterations}")
        self._auth_prefix = f"{bare},{server_first}"
        self._state = "final"
        return server_first.encode()

    def final(self, client_final: bytes) -> bytes:
        if self._state != "final" or self._credential is None:
            raise ScramError("SCRAM client-final message out of order")
        self._state = "failed"
        text = _text(client_final)
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise ScramError("malformed SCRAM client-final message")
        attrs = _attributes(without_proof)
        # Kafka's ScramSaslServer checks endsWith: librdkafka 2.0.x sends client nonce + the whole nonce
        if not attrs.get("r", "").endswith(self._nonce):
            raise ScramError("SCRAM nonce mismatch")
        if attrs.get("c") not in ("biws", "eSws"):  # base64 of "n,," / "y,,": no channel binding
            raise ScramError("SCRAM channel binding is not supported")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise ScramError("malformed SCRAM proof") from None
        auth_message = f"{self._auth_prefix},{without_proof}".encode()
        cred = self._credential
        client_signature = _hmac(self.hash_name, cred.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise ScramError("authentication failed")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        computed = hashlib.new(self.hash_name, client_key).digest()
        if not hmac.compare_digest(computed, cred.stored_key) or self._user is None:
            raise ScramError("authentication failed")
        self._state = "done"
        self.username = self._user
        server_signature = _hmac(self.hash_name, cred.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)

    @property
    def done(self) -> bool:
        return self._state == "done"


class ScramClient:
    """The client side, for tests and for klog's own tools (not used by the server)."""

    def __init__(self, mechanism: str, user: str, password: str, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self.hash_name = _HASHES[mechanism]
        self.user = user
        self.password = password
        self.nonce = nonce if nonce is not None else secrets.token_urlsafe(NONCE_BYTES)
        self._bare = f"n={user.replace('=', '=3D').replace(',', '=2C')},r={self.nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        attrs = _attributes(server_first.decode())
        if not attrs["r"].startswith(self.nonce):
            raise ScramError("server nonce does not extend ours")
        salt = base64.b64decode(attrs["s"])
        salted = salted_password(self.mechanism, self.password, salt, int(attrs["i"]))
        client_key, stored_key, server_key = _keys(self.hash_name, salted)
        without_proof = f"c=biws,r={attrs['r']}"
        auth_message = f"{self._bare},{server_first.decode()},{without_proof}".encode()
        signature = _hmac(self.hash_name, stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = _hmac(self.hash_name, server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> bool:
        return hmac.compare_digest(server_final, b"v=" + base64.b64encode(self._server_signature))
