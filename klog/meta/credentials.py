"""SASL users in LMDB: salted SCRAM credentials per (user, mechanism), never a password.

Key `<user>\\0<mechanism>` -> ScramCredential.to_json(). SASL/PLAIN checks a password against
whichever of the user's credentials exists (the SCRAM keys are enough to verify it). One more key,
DECOY_SECRET_KEY (no user name can start with NUL), holds the store's random secret that unknown
users' decoy credentials are derived from (klog.security.scram.decoy_credential).
"""

from __future__ import annotations

import base64
import secrets

from klog.errors import DataDirError, UnknownUserError, UsageError
from klog.meta.db import MetaDB
from klog.security.scram import ITERATIONS_MAX, ITERATIONS_MIN, MECHANISMS, ScramCredential, make_credential

USER_CHARS_MAX = 255
DECOY_SECRET_KEY = "\0decoy-secret"
DECOY_SECRET_BYTES = 32


def validate_user(name: str) -> None:
    if not name or len(name) > USER_CHARS_MAX or not name.isprintable() or "\0" in name:
        raise UsageError(f"invalid user name {name!r}: use 1-{USER_CHARS_MAX} printable characters")


def validate_mechanism(mechanism: str) -> str:
    upper = mechanism.upper()
    if upper not in MECHANISMS:
        raise UsageError(f"unknown mechanism {mechanism!r} (one of {', '.join(MECHANISMS)})")
    return upper


class CredentialsMeta:
    def __init__(self, db: MetaDB) -> None:
        self.db = db
        self._decoy_secret: bytes | None = None

    def decoy_secret(self) -> bytes:
        """The store's secret for decoy credentials: made once, at random, and kept (so an unknown
        user's salt is the same across restarts, as a real user's is). A read-only store without
        one gets a secret for this process only."""
        if self._decoy_secret is None:
            with self.db.txn() as txn:
                doc = self.db.get_json(txn, "credentials", DECOY_SECRET_KEY)
            if doc is None:
                try:
                    with self.db.txn(write=True) as txn:  # one writer at a time: a racing process's wins
                        doc = self.db.get_json(txn, "credentials", DECOY_SECRET_KEY)
                        if doc is None:
                            doc = {"secret": base64.b64encode(secrets.token_bytes(DECOY_SECRET_BYTES)).decode()}
                            self.db.put_json(txn, "credentials", DECOY_SECRET_KEY, doc)
                except DataDirError:  # opened read-only
                    doc = {"secret": base64.b64encode(secrets.token_bytes(DECOY_SECRET_BYTES)).decode()}
            self._decoy_secret = base64.b64decode(doc["secret"])
        return self._decoy_secret

    def add(self, user: str, mechanism: str, password: str, iterations: int = 4096) -> ScramCredential:
        """Store (or replace) `user`'s credential for `mechanism` made from `password`."""
        validate_user(user)
        mechanism = validate_mechanism(mechanism)
        if not password:
            raise UsageError("the password must not be empty")
        if not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX:
            raise UsageError(f"iterations must be {ITERATIONS_MIN}-{ITERATIONS_MAX}")
        cred = make_credential(mechanism, password, iterations=iterations)
        with self.db.txn(write=True) as txn:
            self.db.put_json(txn, "credentials", f"{user}\0{mechanism}", cred.to_json())
        return cred

    def put(self, user: str, credential: ScramCredential) -> None:
        """Store a credential made elsewhere (AlterUserScramCredentials: the client salted it)."""
        validate_user(user)
        validate_mechanism(credential.mechanism)
        if not ITERATIONS_MIN <= credential.iterations <= ITERATIONS_MAX:
            raise UsageError(f"iterations must be {ITERATIONS_MIN}-{ITERATIONS_MAX}")
        with self.db.txn(write=True) as txn:
            self.db.put_json(txn, "credentials", f"{user}\0{credential.mechanism}", credential.to_json())

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        with self.db.txn() as txn:
            doc = self.db.get_json(txn, "credentials", f"{user}\0{mechanism}")
        return None if doc is None else ScramCredential.from_json(doc)

    def for_user(self, user: str) -> list[ScramCredential]:
        with self.db.txn() as txn:
            return [ScramCredential.from_json(doc) for _, doc in self.db.items(txn, "credentials", f"{user}\0")]

    def list(self) -> list[tuple[str, str, int]]:
        """(user, mechanism, iterations), sorted by user."""
        with self.db.txn() as txn:
            rows = [(key.partition("\0")[0], doc["mechanism"], doc["iterations"])
                    for key, doc in self.db.items(txn, "credentials") if key != DECOY_SECRET_KEY]
        return sorted(rows)

    def delete(self, user: str, mechanism: str | None = None) -> list[str]:
        """Remove `user`'s credential for `mechanism` (all when None); returns the mechanisms removed."""
        mechs = list(MECHANISMS) if mechanism is None else [validate_mechanism(mechanism)]
        removed = []
        with self.db.txn(write=True) as txn:
            for m in mechs:
                if self.db.delete(txn, "credentials", f"{user}\0{m}"):
                    removed.append(m)
        if not removed:
            raise UnknownUserError(f"no user {user!r}" + (f" with {mechs[0]}" if mechanism else ""))
        return removed
