"""SASL user enumeration: an unknown user's SCRAM answer cannot be told from a known one's, by its
salt (derived from the store's secret, not from the name alone) or by the work the server does
(the same derivations on both paths, asserted by counting them, not by timing)."""

from __future__ import annotations

import base64
import hashlib

import pytest

import klog
from klog.security import scram
from klog.security.scram import ScramClient, ScramServer, make_credential
from klog.server.sasl import _plain


def _salt(server_first: bytes) -> bytes:
    fields = dict(part.split("=", 1) for part in server_first.decode().split(","))
    return base64.b64decode(fields["s"])


def _first(secret: bytes, user: str, creds: dict | None = None) -> bytes:
    server = ScramServer("SCRAM-SHA-256", (creds or {}).get, decoy_secret=secret)
    return server.first(ScramClient("SCRAM-SHA-256", user, "pw").first())


def test_the_decoy_secret_is_kept_per_store_and_differs_between_stores(tmp_path):
    with klog.open(str(tmp_path / "a")) as a:
        first = a.credentials.decoy_secret()
        assert len(first) == 32
        a.credentials.add("alice", "SCRAM-SHA-256", "pw")
        assert [row[0] for row in a.credentials.list()] == ["alice"]  # the secret is no user
    with klog.open(str(tmp_path / "a")) as a, klog.open(str(tmp_path / "b")) as b:
        assert a.credentials.decoy_secret() == first  # stable: the same salt after a restart
        assert b.credentials.decoy_secret() != first


def test_an_unknown_users_salt_is_stable_secret_and_not_computable_from_the_name():
    one, other = b"1" * 32, b"2" * 32
    salt = _salt(_first(one, "mallory"))
    assert salt == _salt(_first(one, "mallory"))  # the same at every attempt, like a stored salt
    assert salt != _salt(_first(other, "mallory"))  # another store: another salt
    assert salt != _salt(_first(one, "mallet"))
    assert salt != hashlib.sha256(b"klog-decoy" + b"mallory").digest()  # before: anyone could compute it
    assert len(salt) == len(make_credential("SCRAM-SHA-256", "pw").salt)


def _counting(monkeypatch, name: str) -> list:
    calls: list = []
    real = getattr(scram, name)

    def counted(*args):  # noqa: ANN002, ANN202
        # salted_password(mechanism, password, salt, iterations); decoy_credential(secret, mechanism, user)
        calls.append((args[0], args[3]) if name == "salted_password" else args[1])
        return real(*args)

    monkeypatch.setattr(scram, name, counted)
    return calls


@pytest.mark.parametrize("user,password", [("alice", "s3cret"), ("alice", "wrong"), ("mallory", "s3cret")])
def test_a_scram_exchange_does_the_same_work_for_known_and_unknown_users(monkeypatch, user, password):
    creds = {"alice": make_credential("SCRAM-SHA-256", "s3cret")}
    decoys = _counting(monkeypatch, "decoy_credential")
    derivations = _counting(monkeypatch, "salted_password")
    server = ScramServer("SCRAM-SHA-256", creds.get, decoy_secret=b"s" * 32)
    client = ScramClient("SCRAM-SHA-256", user, password)
    server_first = server.first(client.first())
    client_final = client.final(server_first)
    derivations.clear()  # the client's own PBKDF2 is not the server's work
    try:
        server.final(client_final)
    except scram.ScramError:
        pass
    assert decoys == ["SCRAM-SHA-256"]  # derived for every user, known or not
    assert derivations == []  # and no PBKDF2 on the server for either (the stored keys are enough)


class _Credentials:
    """CredentialsMeta's face for SASL/PLAIN: alice has a SHA-256 credential only."""

    def __init__(self) -> None:
        self.stored = {"alice": [make_credential("SCRAM-SHA-256", "s3cret")]}

    def for_user(self, user: str) -> list:
        return self.stored.get(user, [])

    def decoy_secret(self) -> bytes:
        return b"s" * 32


def test_a_plain_check_runs_the_same_password_derivations_for_known_and_unknown_users(monkeypatch):
    credentials = _Credentials()
    derivations = _counting(monkeypatch, "salted_password")
    seen = []
    for user, password, ok in [("alice", "s3cret", True), ("alice", "wrong", False), ("mallory", "s3cret", False)]:
        derivations.clear()
        assert (_plain(credentials, f"\0{user}\0{password}".encode()) == user) is ok
        seen.append(list(derivations))
    # one PBKDF2 per mechanism at the same iteration count, whether the user exists or not
    assert seen[0] == seen[1] == seen[2] == [(m, 4096) for m in scram.MECHANISMS]
