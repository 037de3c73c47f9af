"""The LMDB environment: one per data directory, safe across processes (LMDB's own locking)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import lmdb

from klog.errors import DataDirError
from klog.meta.change_log import LOGGED_TABLES, log_change
from klog.meta.data_file import cut_short

MAP_SIZE_BYTES = 1 << 32  # address space reserved, not disk used: LMDB files grow as needed
DB_NAMES = ("topics", "groups", "members", "offsets", "credentials", "acls", "quotas", "topic_index", "transactions",
            "group_changes")
# added later (`klog serve`'s security; topic_index: see klog.meta.topic_index; group_changes: see
# klog.meta.change_log): a store last written by an older klog lacks them, and a read-only open
# cannot create them, so there they read as empty
LATER_DB_NAMES = frozenset({"credentials", "acls", "quotas", "topic_index", "transactions", "group_changes"})


KEY_BYTES_MAX = 511  # LMDB's default maximum key size
LONG_KEY_KEPT_BYTES = 400  # a longer key keeps this much (so prefix scans still find it) + a hash
_LONG_KEY_MARK = b"\xff"  # never in UTF-8: a shortened key cannot equal a real one


def _key(key: str) -> bytes:
    """The LMDB key of `key`: itself, or when longer than LMDB allows (a 255-character group id
    with a long topic name), its first bytes, a mark and its SHA-256; the value then carries the
    full key (put_json)."""
    raw = key.encode()
    if len(raw) <= KEY_BYTES_MAX:
        return raw
    import hashlib  # here: a long key is rare, and hashlib's OpenSSL load is not free

    return raw[:LONG_KEY_KEPT_BYTES] + _LONG_KEY_MARK + hashlib.sha256(raw).digest()


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
    short = cut_short(data_file)
    if short is not None:
        # LMDB maps the file and reads the pages its meta page names: past the end of a cut file
        # that is SIGBUS, every command dying with "Bus error" and no word of why
        raise DataDirError(f"the metadata database {data_file} is cut short ({short}); restore it, or move "
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
                dbs = {}
                for name in DB_NAMES:
                    try:
                        dbs[name] = env.open_db(name.encode(), create=not read_only)
                    except lmdb.NotFoundError:
                        if name not in LATER_DB_NAMES:
                            raise
            except lmdb.Error as e:
                env.close()
                raise DataDirError(f"cannot read the metadata in {path}: {_why(e)}") from None
            shared = (env, dbs, 0)
        env, dbs, users = shared
        if not read_only and env.flags().get("readonly"):
            raise DataDirError(f"the metadata at {path} is open read-only in this process")
        _OPEN[self.path] = (env, dbs, users + 1)
        self.env = env
        self.dbs = dbs
        self._closed = False

    @contextmanager
    def txn(self, write: bool = False) -> Iterator[lmdb.Transaction]:
        """A transaction; LMDB's own errors (a damaged file, a full map) become one-line
        DataDirErrors, and a failed write transaction leaves nothing behind (it is aborted)."""
        if write and self.read_only:
            raise DataDirError(f"the metadata at {self.path} is open read-only")
        try:
            with self.env.begin(write=write) as txn:
                yield txn
        except lmdb.Error as e:
            raise DataDirError(f"metadata error in {self.path}: {_why(e)}") from None

    def last_write(self) -> int:
        """The id of the last write transaction, by any process, that a read begun now sees: equal
        ids mean nothing was written in between. (Not env.info()'s last_txnid: LMDB writes a
        commit's meta page before it lets new readers see the commit, so that id can name a write
        the reads that follow do not show yet, and a caller recording it as seen would miss it.)"""
        try:
            with self.env.begin() as txn:
                return txn.id()
        except lmdb.Error as e:  # closed meanwhile
            raise DataDirError(f"metadata error in {self.path}: {_why(e)}") from None

    def get_raw(self, txn: lmdb.Transaction, db: str, key: str) -> bytes | None:
        raw = txn.get(_key(key), db=self.dbs[db])
        if raw is not None and len(key.encode()) > KEY_BYTES_MAX:
            raw = json.dumps(json.loads(raw)["v"], separators=(",", ":")).encode()
        return raw

    def get_json(self, txn: lmdb.Transaction, db: str, key: str) -> Any:
        if db not in self.dbs:  # a LATER_DB_NAMES db missing from a read-only store
            return None
        raw = txn.get(_key(key), db=self.dbs[db])
        if raw is None:
            return None
        value = json.loads(raw)
        return value["v"] if len(key.encode()) > KEY_BYTES_MAX else value

    def put_json(self, txn: lmdb.Transaction, db: str, key: str, value: Any) -> None:
        if len(key.encode()) > KEY_BYTES_MAX:
            value = {"k": key, "v": value}  # the key itself, which its LMDB key no longer spells
        txn.put(_key(key), json.dumps(value, separators=(",", ":")).encode(), db=self.dbs[db])
        if db in LOGGED_TABLES:
            log_change(self, txn, db, key)

    def delete(self, txn: lmdb.Transaction, db: str, key: str) -> bool:
        deleted = txn.delete(_key(key), db=self.dbs[db])
        if deleted and db in LOGGED_TABLES:
            log_change(self, txn, db, key)
        return deleted

    def items(self, txn: lmdb.Transaction, db: str, prefix: str = "") -> Iterator[tuple[str, Any]]:
        for k, v in self.items_raw(txn, db, prefix):
            yield k, json.loads(v)

    def items_raw(self, txn: lmdb.Transaction, db: str, prefix: str = "") -> Iterator[tuple[str, bytes]]:
        """(key, stored JSON bytes) in key order, for callers that cache what they parse."""
        if db not in self.dbs:  # a LATER_DB_NAMES db missing from a read-only store
            return
        cursor = txn.cursor(db=self.dbs[db])
        wanted = prefix.encode()
        # a prefix longer than what shortened keys keep (a client's 4,000-byte group id) is scanned
        # by what they keep, each key then checked whole
        start = wanted[:LONG_KEY_KEPT_BYTES]
        if not cursor.set_range(start):
            return
        for k, v in cursor:
            if not k.startswith(start):
                break
            if _LONG_KEY_MARK in k:
                wrapped = json.loads(v)
                if wrapped["k"].startswith(prefix):
                    yield wrapped["k"], json.dumps(wrapped["v"], separators=(",", ":")).encode()
            elif len(wanted) <= LONG_KEY_KEPT_BYTES or k.startswith(wanted):
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
