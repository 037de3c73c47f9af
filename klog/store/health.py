"""Is a log directory usable? Missing, read-only, full, or replaced by a new empty one.

Each log directory carries `klog-logdir.id`, a random id also recorded in klog.json (the role
of the directory.id in Kafka's meta.properties). A directory that exists but lacks the id it
should have is a new disk put in place of a lost one: its replicas hold nothing trustworthy
and must be caught up before they rejoin the in-sync set.
"""

from __future__ import annotations

import errno
import os

from klog.errors import StorageError

ID_FILE = "klog-logdir.id"
FREE_BYTES_MIN = 1 << 20  # below this a directory counts as full: an append would fail midway

OK = "ok"
MISSING = "missing"
READ_ONLY = "read-only"
FULL = "full"
REPLACED = "replaced"


def write_identity(path: str) -> str:
    import uuid  # here: written once per store (and uuid imports platform)

    ident = str(uuid.uuid4())
    tmp = os.path.join(path, ID_FILE + ".tmp")
    with open(tmp, "w") as f:
        f.write(ident + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(path, ID_FILE))
    return ident


def read_identity(path: str) -> str | None:
    try:
        # (errors="replace": a flipped byte that is no UTF-8 is another id, as any other flip is,
        # not a UnicodeDecodeError traceback from every writer)
        with open(os.path.join(path, ID_FILE), errors="replace") as f:
            return f.read().strip() or None
    except OSError as e:
        if e.errno in (errno.EMFILE, errno.ENFILE):  # this process's trouble, not a replaced disk
            raise StorageError(f"too many open files reading {path} (raise the limit: ulimit -n)") from None
        return None


# path -> (the id file's device, inode, mtime and size; its id): a writer checks every replica's
# directory before each append, and re-reading the id file was most of that check's cost
_identities: dict[str, tuple[tuple[int, int, int, int], str | None]] = {}


def _identity(path: str, id_file: str | None = None) -> str | None:
    """read_identity, re-read only when the id file's stat changed (a new disk is a new device).
    `id_file`: os.path.join(path, ID_FILE), when the caller has it already."""
    try:
        st = os.stat(id_file or os.path.join(path, ID_FILE))
    except OSError:
        _identities.pop(path, None)
        return None
    key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
    known = _identities.get(path)
    if known is not None and known[0] == key:
        return known[1]
    ident = read_identity(path)
    _identities[path] = (key, ident)
    return ident


def check_log_dir(path: str, expected_id: str | None, id_file: str | None = None) -> str:
    """The directory's state; a writer asks before every append, so a healthy directory costs
    three system calls: the id file's stat (there, so the directory is), access, statvfs.
    `id_file`: os.path.join(path, ID_FILE), when the caller has it already."""
    if expected_id is not None:
        ident = _identity(path, id_file)
        if ident is None:
            return REPLACED if os.path.isdir(path) else MISSING
        if ident != expected_id:
            return REPLACED
    elif not os.path.isdir(path):
        return MISSING
    if not os.access(path, os.W_OK):
        return READ_ONLY
    try:
        st = os.statvfs(path)
    except OSError:
        return MISSING
    if st.f_bavail * st.f_frsize < FREE_BYTES_MIN:
        return FULL
    return OK
