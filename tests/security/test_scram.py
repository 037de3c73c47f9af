"""SCRAM server side against the RFCs' own exchanges (RFC 5802 SHA-1, RFC 7677 SHA-256) and a
round trip for SHA-512; every way a client can fail is refused with the same ScramError."""

from __future__ import annotations

import base64

import pytest

from klog.errors import ScramError
from klog.security.scram import ScramClient, ScramCredential, ScramServer, check_password, make_credential


def _server(mechanism, salt_b64, nonce, users=("user",), password="pencil"):
    cred = make_credential(mechanism, password, salt=base64.b64decode(salt_b64), iterations=4096)
    return ScramServer(mechanism, lambda u: cred if u in users else None, nonce=nonce), cred


def test_rfc5802_sha1_vector():
    server, _ = _server("SCRAM-SHA-1", "QSXCR+Q6sek8bf92", "3rfcNHYJY1ZVvWVs7j")
    first = server.first(b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL")
    assert first == b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096"
    final = server.final(b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=")
    assert final == b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ="
    assert server.username == "user" and server.done


def test_rfc7677_sha256_vector():
    server, _ = _server("SCRAM-SHA-256", "W22ZaJ0SNY7soEsUEjb6gQ==", "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    final = server.final(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                         b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_round_trip(mechanism):
    cred = make_credential(mechanism, "s3cret")
    server = ScramServer(mechanism, {"alice": cred}.get)
    client = ScramClient(mechanism, "alice", "s3cret")
    final = server.final(client.final(server.first(client.first())))
    assert client.verify(final) and server.username == "alice"


@pytest.mark.parametrize("user,password,mechanism", [
    ("alice", "wrong", "SCRAM-SHA-256"),  # wrong password
    ("mallory", "s3cret", "SCRAM-SHA-256"),  # unknown user
    ("alice", "s3cret", "SCRAM-SHA-512"),  # the user has no SHA-512 credential
])
def test_refused(user, password, mechanism):
    creds = {"alice": make_credential("SCRAM-SHA-256", "s3cret")}
    server = ScramServer(mechanism, creds.get)
    client = ScramClient(mechanism, user, password)
    server_first = server.first(client.first())
    assert server_first.count(b",") == 2  # the unknown user sees the same shape of answer
    with pytest.raises(ScramError):
        server.final(client.final(server_first))
    assert server.username is None and not server.done


@pytest.mark.parametrize("message", [b"", b"garbage", b"p=tls-unique,,n=a,r=x", b"n,,r=x", b"n,,n=a",
                                     b"n,,n=a=b,r=x", b"n,," + b"x" * 5000, b"\xff\xfe"])
def test_malformed_first(message):
    server = ScramServer("SCRAM-SHA-256", lambda u: None)
    with pytest.raises(ScramError):
        server.first(message)


def test_final_checks_nonce_and_order():
    creds = {"alice": make_credential("SCRAM-SHA-256", "pw")}
    server = ScramServer("SCRAM-SHA-256", creds.get)
    with pytest.raises(ScramError):
        server.final(b"c=biws,r=x,p=AAAA")  # before first
    client = ScramClient("SCRAM-SHA-256", "alice", "pw")
    server = ScramServer("SCRAM-SHA-256", creds.get)
    server.first(client.first())
    with pytest.raises(ScramError):
        server.final(b"c=biws,r=not-the-nonce,p=AAAA")
    with pytest.raises(ScramError):  # a failed exchange cannot be retried on the same object
        server.final(b"c=biws,r=x,p=AAAA")


def test_credential_json_and_plain_check():
    cred = make_credential("SCRAM-SHA-512", "a-secret-pw", iterations=4096)
    again = ScramCredential.from_json(cred.to_json())
    assert again == cred
    assert check_password(again, "a-secret-pw") and not check_password(again, "a-secret-pW")
    # a password long enough that base64 salts and keys cannot hold it by chance ("pw" could)
    assert "a-secret-pw" not in str(cred.to_json())
