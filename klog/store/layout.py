"""The data directory: store config (klog.json), LMDB metadata, shared state, locks, log dirs.

    <data dir>/klog.json        store config: log directories and broker-style defaults
    <data dir>/meta/            LMDB environment (klog/meta)
    <data dir>/state/           <topic>-<partition>.state: high watermark, log start, epoch
                                (and .cleaner, the cleaner checkpoint)
    <data dir>/locks/           <topic>-<partition>.lock: one writer at a time
    <data dir>/logs/            the first log directory (more can live anywhere: other disks)

A `<topic>-<partition>` too long for the file names of state/ and locks/ (a topic name near
Kafka's 249-character limit) is shortened there: names.partition_file_stem.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Iterator

from klog.errors import DataDirError, UsageError
from klog.store import health
from klog.store.health import write_identity
from klog.store.names import open_nofollow
from klog.store.plain import Plain

CONFIG_NAME = "klog.json"
# flock'ed while klog.json's list of log directories is changed (exclusive) or a replica is placed in
# one of them (shared): in locks/, and no `<topic>-<partition>.lock` (no "-<number>" before ".lock")
LOG_DIRS_LOCK = "log-dirs.lock"
LAYOUT_VERSION = 1
STORE_DEFAULTS = {
    # Kafka broker names, so users recognise them
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
    # group coordination by klog serve for Kafka clients (klog/server/coordinator.py)
    "group.initial.rebalance.delay.ms": "3000",
    "group.min.session.timeout.ms": "6000",
    "group.max.session.timeout.ms": "1800000",
    # committed offsets' expiry (klog/meta/groups.py: GroupsMeta.expire_offsets)
    "offsets.retention.minutes": "10080",
    "offsets.retention.check.interval.ms": "600000",
    # __consumer_offsets in Kafka's format, kept in step with LMDB by klog serve (klog/broker/offsets_topic.py)
    "offsets.topic.num.partitions": "50",
    # transactions (klog/client/txn_coordinator.py): the longest transaction.timeout.ms a producer may
    # ask for, and how often abandoned transactions are looked for and aborted
    "transaction.max.timeout.ms": "900000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "10000",
    # a transactional id idle this long (no transaction open) is forgotten, with its producer id
    "transactional.id.expiration.ms": "604800000",
    # klog serve's retention and compaction passes (klog/server/log_cleaner.py)
    "log.retention.check.interval.ms": "300000",
    "log.cleaner.backoff.ms": "15000",
    "log.cleaner.enable": "true",
    "log.cleaner.io.max.bytes.per.second": "1.7976931348623157E308",  # Kafka's: Double.MaxValue, no throttle
}


# A new data directory and each new log directory are made owner-only: every file beneath (segments,
# LMDB metadata with the SASL credentials) is out of other local users' reach whatever its own mode.
# KLOG_DIR_MODE (octal) shares a store with a group instead: 2750 lets the group read, 2770 (with a
# umask of 002) write too; the setgid bit keeps new files in the directory's group.
DIR_MODE_DEFAULT = 0o700


def store_dir_mode() -> int:
    text = os.environ.get("KLOG_DIR_MODE")
    if not text:
        return DIR_MODE_DEFAULT
    try:
        mode = int(text, 8)
    except ValueError:
        mode = -1
    if not 0o700 <= mode <= 0o7777 or mode & 0o700 != 0o700 or mode & 0o007:
        raise DataDirError(f"KLOG_DIR_MODE={text!r}: want an octal mode the owner has in full and others "
                           "have none of (700, 750, 770, 2750, 2770)")
    return mode


def _make_private_dir(path: str) -> None:
    """Create `path` (and parents) if missing; a directory this call created gets store_dir_mode()."""
    mode = store_dir_mode()
    existed = os.path.isdir(path)
    os.makedirs(path, exist_ok=True)
    if not existed:
        os.chmod(path, mode)


def default_data_dir() -> str:
    """$KLOG_DATA_DIR, else the XDG data directory's klog/ (~/.local/share/klog)."""
    env = os.environ.get("KLOG_DATA_DIR")
    if env is not None:
        if not env.strip():  # an unset variable's slip ($UNSET expands to ''): never the default store
            raise UsageError("KLOG_DATA_DIR is set but empty: give a path, or unset it for the default store")
        return env
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "klog")


class LogDir(Plain):
    _fields = ("id", "path", "identity")

    def __init__(self, id: int, path: str, identity: str | None = None) -> None:  # noqa: A002 - its JSON name
        self.id = id
        self.path = path  # absolute, or relative to the data dir
        self.identity = identity  # the id written in the directory (health.py)


class DataDir(Plain):
    _fields = ("path", "log_dirs", "defaults")

    def __init__(self, path: str, log_dirs: list[LogDir] | None = None, defaults: dict[str, str] | None = None) -> None:
        self.path = path
        self.log_dirs = [] if log_dirs is None else log_dirs
        self.defaults = {} if defaults is None else defaults
        self._loaded: tuple[int, int, int] | None = None  # klog.json's (inode, mtime_ns, size) as last read or written
        self._held = threading.local()  # this thread's hold of the log-dirs lock: its depth
        self.removed_ids: set[int] = set()  # directories this DataDir had, removed since (by any process)

    @property
    def meta_dir(self) -> str:
        return os.path.join(self.path, "meta")

    @property
    def state_dir(self) -> str:
        return os.path.join(self.path, "state")

    @property
    def lock_dir(self) -> str:
        return os.path.join(self.path, "locks")

    def log_dir_path(self, log_dir_id: int) -> str:
        for d in self.log_dirs:
            if d.id == log_dir_id:
                return d.path if os.path.isabs(d.path) else os.path.join(self.path, d.path)
        raise DataDirError(f"log directory {log_dir_id} is not configured in {self.path}")

    @contextlib.contextmanager
    def log_dirs_lock(self, exclusive: bool = False) -> Iterator[None]:
        """Hold the store's lock on its list of log directories (locks/log-dirs.lock, every process),
        with this DataDir's list re-read from klog.json if another process changed it. Exclusive:
        to change the list (add, remove, reidentify); shared: to place a replica in a directory of
        it (a new topic's or partition's, a move's target), so that the directory cannot be
        forgotten between the look and the metadata write naming it. Re-entrant within a thread (a
        nested hold is the outer one; an exclusive one is not taken inside a shared one). Lock
        order: a partition's lock before this one, never the other way round."""
        depth = getattr(self._held, "depth", 0)
        if depth:
            assert not exclusive or self._held.exclusive, "log-dirs lock: exclusive asked inside a shared hold"
            self._held.depth = depth + 1
            try:
                yield
            finally:
                self._held.depth -= 1
            return
        lock_path = os.path.join(self.lock_dir, LOG_DIRS_LOCK)
        try:  # a descriptor of its own per hold: flock then excludes this process's other threads too
            fd = open_nofollow(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC)  # (as the partitions' lock files)
        except OSError as e:
            raise DataDirError(f"cannot open {lock_path}: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            self._held.depth, self._held.exclusive = 1, exclusive
            try:
                self.refresh()
                yield
            finally:
                self._held.depth = 0
        finally:
            os.close(fd)  # (releases the flock)

    def refresh(self) -> bool:
        """Re-read the list of log directories (and the defaults) if klog.json changed since this
        DataDir last read or wrote it: one stat when it did not. Returns whether it re-read."""
        config_path = os.path.join(self.path, CONFIG_NAME)
        try:
            st = os.stat(config_path)
        except OSError:
            return False  # (gone or unreadable: keep what was loaded; open() says what is wrong)
        if (st.st_ino, st.st_mtime_ns, st.st_size) == self._loaded:
            return False
        doc, loaded = _read_config(config_path)  # (the key of the file read: it may have changed since the stat)
        fresh = self._from_doc(doc, config_path)
        ids = {d.id for d in fresh.log_dirs}
        self.removed_ids = (self.removed_ids | {d.id for d in self.log_dirs}) - ids
        self.log_dirs, self.defaults = fresh.log_dirs, fresh.defaults
        self._loaded = loaded
        return True

    def add_log_dir(self, path: str) -> LogDir:
        """Register another log directory (another disk); it must be empty or new."""
        with self.log_dirs_lock(exclusive=True):  # (the list as it is now, not as this process loaded it)
            absolute = os.path.abspath(os.path.expanduser(path))
            real = os.path.realpath(absolute)
            for d in self.log_dirs:
                existing = os.path.realpath(self.log_dir_path(d.id))
                if existing == real:
                    raise DataDirError(f"{path} is already log directory {d.id}")
                if _inside(real, existing) or _inside(existing, real):  # (one would list the other's folders)
                    raise UsageError(f"{path} overlaps log directory {d.id} ({existing}): give a directory "
                                     "neither inside nor holding another")
            root = os.path.realpath(self.path)
            meta = os.path.join(root, "meta")
            if real in (root, meta) or _inside(root, real) or _inside(real, meta):
                raise UsageError(f"{path} holds or is inside the data directory's own files ({root}): "
                                 "give a directory of its own")
            for name, what in ((CONFIG_NAME, "another klog store"), (health.ID_FILE, "another store's log directory"),
                               ("meta.properties", "a Kafka log directory")):
                if os.path.exists(os.path.join(real, name)):
                    raise UsageError(f"{path} is {what} (it has {name}): give an empty or new directory")
            try:
                _make_private_dir(absolute)
            except OSError as e:
                raise DataDirError(f"cannot create log directory {path}: {e.strerror}") from None
            new = LogDir(max((d.id for d in self.log_dirs), default=-1) + 1, absolute, write_identity(absolute))
            self.log_dirs = [*self.log_dirs, new]
            self.save()
            self.removed_ids = self.removed_ids - {new.id}
            return new

    def reidentify(self, log_dir_id: int) -> bool:
        """A replaced (new, empty) directory becomes the log dir: give it a fresh identity. False
        when, in klog.json as it is now, the directory already has the identity its id file holds:
        another process's writer (or this one's, meanwhile) gave it one, which is kept (a new one
        each time would have two long-lived writers replace it in turn, before every append)."""
        with self.log_dirs_lock(exclusive=True):
            known = next((d.identity for d in self.log_dirs if d.id == log_dir_id), None)
            if known is not None and health.read_identity(self.log_dir_path(log_dir_id)) == known:
                return False
            dirs = [LogDir(d.id, d.path, d.identity) for d in self.log_dirs]
            for d in dirs:
                if d.id == log_dir_id:
                    d.identity = write_identity(self.log_dir_path(d.id))
            self.log_dirs = dirs
            self.save()
            return True

    def remove_log_dir(self, log_dir_id: int) -> None:
        with self.log_dirs_lock(exclusive=True):
            self.log_dir_path(log_dir_id)  # raises if unknown
            self.log_dirs = [d for d in self.log_dirs if d.id != log_dir_id]
            self.save()
            self.removed_ids = self.removed_ids | {log_dir_id}

    def default(self, name: str) -> str:
        return self.defaults.get(name, STORE_DEFAULTS[name])

    def save(self) -> None:
        doc = {"version": LAYOUT_VERSION, "log_dirs": [{"id": d.id, "path": d.path, "identity": d.identity}
                                                       for d in self.log_dirs],
               "defaults": self.defaults}
        tmp = os.path.join(self.path, CONFIG_NAME + ".tmp")
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(self.path, CONFIG_NAME))
        st = os.stat(os.path.join(self.path, CONFIG_NAME))
        self._loaded = (st.st_ino, st.st_mtime_ns, st.st_size)

    @classmethod
    def open(cls, path: str, create: bool = True, log_dirs: list[str] | None = None,
             read_only: bool = False) -> DataDir:
        """`read_only`: create nothing, and work on a read-only mount or without write permission."""
        if not path.strip():
            raise UsageError("the data directory path is empty (--data-dir '' or KLOG_DATA_DIR='')")
        path = os.path.abspath(os.path.expanduser(path))
        config_path = os.path.join(path, CONFIG_NAME)
        if not os.path.exists(config_path):
            if not create or read_only:
                raise DataDirError(f"no klog store at {path}")
            return cls._create(path, log_dirs)
        doc, loaded = _read_config(config_path)
        data_dir = cls._from_doc(doc, config_path)
        data_dir.path = path
        data_dir._loaded = loaded
        if not read_only:
            data_dir._ensure_dirs()
        return data_dir

    @classmethod
    def _from_doc(cls, doc: object, config_path: str) -> DataDir:
        """klog.json, checked field by field: a wrong type is one line naming it, not a traceback."""
        def bad(what: str) -> DataDirError:
            return DataDirError(f"{config_path}: {what}")

        if not isinstance(doc, dict):
            raise bad("not a JSON object")
        if doc.get("version") != LAYOUT_VERSION:
            raise DataDirError(f"{config_path} has layout version {doc.get('version')}; expected {LAYOUT_VERSION}")
        entries = doc.get("log_dirs")
        if not isinstance(entries, list) or not entries:
            raise bad("'log_dirs' must be a non-empty list")
        dirs = []
        for i, d in enumerate(entries):
            if (not isinstance(d, dict) or type(d.get("id")) is not int or not isinstance(d.get("path"), str)
                    or not d["path"] or not isinstance(d.get("identity"), str | None)):
                raise bad(f"log_dirs[{i}] must be an object with an integer 'id' and a non-empty string 'path'")
            dirs.append(LogDir(d["id"], d["path"], d.get("identity")))
        defaults = doc.get("defaults", {})
        if not isinstance(defaults, dict) or not all(isinstance(v, str) for v in defaults.values()):
            raise bad("'defaults' must be an object of string values")
        for name in ("num.partitions", "default.replication.factor"):
            if name in defaults and not (defaults[name].isdigit() and int(defaults[name]) > 0):
                raise bad(f"default '{name}' must be a positive integer, not {defaults[name]!r}")
        if defaults.get("auto.create.topics.enable", "true") not in ("true", "false"):
            raise bad("default 'auto.create.topics.enable' must be true or false")
        return cls("", dirs, defaults)

    @classmethod
    def _create(cls, path: str, log_dirs: list[str] | None) -> DataDir:
        try:
            _make_private_dir(path)
        except OSError as e:
            raise DataDirError(f"cannot create data directory {path}: {e.strerror}") from None
        if not os.access(path, os.W_OK):
            raise DataDirError(f"data directory {path} is not writable")
        dirs = [LogDir(i, p) for i, p in enumerate(log_dirs or ["logs"])]
        data_dir = cls(path, dirs, {})
        data_dir._ensure_dirs()
        for d in dirs:
            _make_private_dir(data_dir.log_dir_path(d.id))
            d.identity = write_identity(data_dir.log_dir_path(d.id))
        data_dir.save()
        return data_dir

    def _ensure_dirs(self) -> None:
        # log dirs are not re-created here: a missing one is a failed disk (replicas.py decides)
        try:
            for sub in (self.meta_dir, self.state_dir, self.lock_dir):
                os.makedirs(sub, exist_ok=True)
        except OSError as e:
            raise DataDirError(f"cannot prepare data directory {self.path}: {e.strerror}") from None
        if not os.access(self.path, os.W_OK):
            raise DataDirError(f"data directory {self.path} is not writable")


def _read_config(config_path: str) -> tuple[dict, tuple[int, int, int]]:
    """klog.json's document and the (inode, mtime_ns, size) of the file it was read from."""
    try:
        with open(config_path) as f:
            st = os.fstat(f.fileno())
            return json.load(f), (st.st_ino, st.st_mtime_ns, st.st_size)
    except (OSError, ValueError) as e:
        raise DataDirError(f"cannot read {config_path}: {e}") from None


def _inside(path: str, folder: str) -> bool:
    """Whether real path `path` is below real path `folder`."""
    return path.startswith(folder.rstrip(os.sep) + os.sep)
