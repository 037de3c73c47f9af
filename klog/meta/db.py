"""The LMDB environment: one per data directory, safe across processes (LMDB's own locking)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import lmdb

from klog.errors import DataDirError

MAP_SIZE_BYTES = 1 << 32  # address space reserved, not disk used: LMDB files grow as needed
DB_NAMES = ("topics", "groups", "members", "offsets")


def _why(e: lmdb.Error) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _open_env(path: str, read_only: bool) -> lmdb.Environment:
    data_file = os.path.join(path, "data.mdb")
    if read_only and not os.path.exists(data_file):
        raise DataDirError(f"no metadata database at {path} (lost?); a read-only command creates none")
    if os.path.exists(data_file) and os.path.getsize(data_file) == 0:
        # LMDB would start a new empty database over it: the topics would vanish, and the next
        # produce would create them anew over their old folders
        raise DataDirError(f"the metadata database {data_file} is empty (lost or truncated); restore it, or move "
                           f"{path} away to start a new one")
    common = dict(max_dbs=len(DB_NAMES) + 2, map_size=MAP_SIZE_BYTES, subdir=True, max_readers=512)
    try:
        if not read_only:
            return lmdb.open(path, lock=True, sync=True, metasync=True, mode=0o666, **common)  # the umask decides
        try:
            return lmdb.open(path, readonly=True, lock=True, **common)
        except lmdb.Error:
            # a read-only mount or no write permission: the lock file cannot be written, and no
            # writer can be running on such a store, so reading without LMDB's reader table is safe
            return lmdb.open(path, readonly=True, lock=False, **common)
    except lmdb.Error as e:
        raise DataDirError(f"cannot open metadata at {path}: {_why(e)}") from None


# LMDB allows one open environment per path per process: Stores in one process share it.
_OPEN: dict[str, tuple[lmdb.Environment, dict, int]] = {}


class MetaDB:
    def __init__(self, path: str, read_only: bool = False) -> None:
        """`read_only`: never create or write (a read-only command, a read-only mount): a missing
        database is an error, not a new empty one."""
        self.path = os.path.realpath(path)
        self.read_only = read_only
        shared = _OPEN.get(self.path)
        if shared is None:
            env = _open_env(self.path, read_only)
            try:
                # a damaged data.mdb fails here, as one line (each open_db commits its own txn)
                dbs = {name: env.open_db(name.encode(), create=not read_only) for name in DB_NAMES}
            except lmdb.Error as e:
                env.close()
                raise DataDirError(f"cannot read the metadata in {path}: {_why(e)}") from None
            shared = (env, dbs, 0)
        env, dbs, users = shared
        _OPEN[self.path] = (env, dbs, users + 1)
        self.env = env
        self.dbs = dbs
        self._closed = False

    @contextmanager
    def txn(self, write: bool = False) -> Iterator[lmdb.Transaction]:
        with self.env.begin(write=write) as txn:
            yield txn

    def get_raw(self, txn: lmdb.Transaction, db: str, key: str) -> bytes | None:
        return txn.get(key.encode(), db=self.dbs[db])

    def get_json(self, txn: lmdb.Transaction, db: str, key: str) -> Any:
        raw = txn.get(key.encode(), db=self.dbs[db])
        return None if raw is None else json.loads(raw)

    def put_json(self, txn: lmdb.Transaction, db: str, key: str, value: Any) -> None:
        txn.put(key.encode(), json.dumps(value, separators=(",", ":")).encode(), db=self.dbs[db])

    def delete(self, txn: lmdb.Transaction, db: str, key: str) -> bool:
        return txn.delete(key.encode(), db=self.dbs[db])

    def items(self, txn: lmdb.Transaction, db: str, prefix: str = "") -> Iterator[tuple[str, Any]]:
        for k, v in self.items_raw(txn, db, prefix):
            yield k, json.loads(v)

    def items_raw(self, txn: lmdb.Transaction, db: str, prefix: str = "") -> Iterator[tuple[str, bytes]]:
        """(key, stored JSON bytes) in key order, for callers that cache what they parse."""
        cursor = txn.cursor(db=self.dbs[db])
        start = prefix.encode()
        if not cursor.set_range(start):
            return
        for k, v in cursor:
            if not k.startswith(start):
                break
            yield k.decode(), v

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        env, dbs, users = _OPEN[self.path]
        if users <= 1:
            del _OPEN[self.path]
            env.close()
        else:
            _OPEN[self.path] = (env, dbs, users - 1)
