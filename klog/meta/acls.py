"""ACL bindings and the authorizer's settings in LMDB (db `acls`).

Keys: `b\\0<binding as canonical JSON>` -> binding (so adding one twice stores it once);
`s\\0config` -> {"super_users": [...], "allow_everyone_if_no_acl_found": true|false|null}.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from klog.errors import AclError, UsageError
from klog.meta.db import MetaDB
from klog.security.acl import AclBinding, AclFilter, AuthorizerConfig

_BINDING = "b\0"
_CONFIG = "s\0config"


def _key(b: AclBinding) -> str:
    return _BINDING + json.dumps(b.to_json(), sort_keys=True, separators=(",", ":"))


class AclsMeta:
    def __init__(self, db: MetaDB) -> None:
        self.db = db

    def add(self, bindings: Iterable[AclBinding]) -> list[AclBinding]:
        bindings = list(bindings)
        for b in bindings:
            try:
                b.validate()
            except AclError as e:
                raise UsageError(str(e)) from None
        with self.db.txn(write=True) as txn:
            for b in bindings:
                self.db.put_json(txn, "acls", _key(b), b.to_json())
        return bindings

    def list(self, acl_filter: AclFilter | None = None) -> list[AclBinding]:
        with self.db.txn() as txn:
            all_ = [AclBinding.from_json(doc) for _, doc in self.db.items(txn, "acls", _BINDING)]
        return sorted(b for b in all_ if acl_filter is None or acl_filter.matches(b))

    def remove(self, acl_filter: AclFilter) -> list[AclBinding]:
        """Delete every binding the filter matches (in one transaction); returns them."""
        with self.db.txn(write=True) as txn:
            gone = [b for b in (AclBinding.from_json(doc) for _, doc in self.db.items(txn, "acls", _BINDING))
                    if acl_filter.matches(b)]
            for b in gone:
                self.db.delete(txn, "acls", _key(b))
        return sorted(gone)

    def config(self) -> AuthorizerConfig:
        with self.db.txn() as txn:
            doc = self.db.get_json(txn, "acls", _CONFIG) or {}
        return AuthorizerConfig(frozenset(doc.get("super_users", ())), doc.get("allow_everyone_if_no_acl_found"))

    def set_config(self, super_users: Iterable[str] | None = None,
                   allow_everyone_if_no_acl_found: bool | None | str = "keep") -> AuthorizerConfig:
        """Change the settings given (super_users None and allow 'keep' leave them as they are)."""
        with self.db.txn(write=True) as txn:
            doc = self.db.get_json(txn, "acls", _CONFIG) or {}
            if super_users is not None:
                # Kafka's super.users is one string, principals separated by ';': take that form too
                users = sorted({u.strip() for entry in super_users for u in entry.split(";") if u.strip()})
                for u in users:
                    if ":" not in u or u.endswith(":"):
                        raise UsageError(f"super user {u!r} must be TYPE:NAME (User:admin)")
                doc["super_users"] = users
            if allow_everyone_if_no_acl_found != "keep":
                doc["allow_everyone_if_no_acl_found"] = allow_everyone_if_no_acl_found
            self.db.put_json(txn, "acls", _CONFIG, doc)
        return self.config()
