"""Client quotas in LMDB (db `quotas`): entity (as JSON) -> {quota key: value}."""

from __future__ import annotations

import math

from klog.errors import UsageError
from klog.meta.db import MetaDB
from klog.security.quota import ENTITY_TYPES, QUOTA_KEYS, Entity, entity_from_json, entity_to_json


def validate_entity(e: Entity) -> None:
    types = [t for t, _ in e]
    if not types or len(set(types)) != len(types) or any(t not in ENTITY_TYPES for t in types):
        raise UsageError(f"a quota entity is a user, a client id, or both (got {types})")
    for _, name in e:
        if name is not None and (not name.isprintable() or "\0" in name):
            raise UsageError(f"invalid entity name {name!r}")


def validate_quota(key: str, value: float) -> None:
    if key not in QUOTA_KEYS:
        raise UsageError(f"unknown quota {key!r} (one of {', '.join(QUOTA_KEYS)})")
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"quota {key} must be a positive number (got {value})")


class QuotasMeta:
    def __init__(self, db: MetaDB) -> None:
        self.db = db

    def all(self) -> dict[Entity, dict[str, float]]:
        with self.db.txn() as txn:
            return {entity_from_json(k): v for k, v in self.db.items(txn, "quotas")}

    def alter(self, e: Entity, set_: dict[str, float] | None = None, remove: list[str] | None = None,
              validate_only: bool = False) -> dict[str, float]:
        """Set and remove quota keys of one entity in one transaction; returns what it then has."""
        validate_entity(e)
        for key, value in (set_ or {}).items():
            validate_quota(key, value)
        for key in remove or []:
            if key not in QUOTA_KEYS:
                raise UsageError(f"unknown quota {key!r} (one of {', '.join(QUOTA_KEYS)})")
        with self.db.txn(write=not validate_only) as txn:
            doc = dict(self.db.get_json(txn, "quotas", entity_to_json(e)) or {})
            doc.update(set_ or {})
            for key in remove or []:
                doc.pop(key, None)
            if not validate_only:
                if doc:
                    self.db.put_json(txn, "quotas", entity_to_json(e), doc)
                else:
                    self.db.delete(txn, "quotas", entity_to_json(e))
        return doc
