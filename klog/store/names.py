"""Topic-name rules (kafka-log-format.md §6), the names of files klog keeps per partition, and
the guard that keeps paths inside the store."""

from __future__ import annotations

import errno
import os
import re

from klog.errors import InvalidTopicError, SymlinkError, UnsafePathError

TOPIC_NAME_LENGTH_MAX = 249
# Kafka's internal topics (Topic.INTERNAL_TOPICS): Kafka's coordinators own them, so klog serve never
# creates them as ordinary topics, nor lets a client create or delete them
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> str:
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name '{name}' is not allowed")
    if len(name) > TOPIC_NAME_LENGTH_MAX:
        raise InvalidTopicError(f"topic name is {len(name)} characters long; the limit is {TOPIC_NAME_LENGTH_MAX}")
    if not _LEGAL.fullmatch(name):
        bad = sorted({c for c in name if not _LEGAL.fullmatch(c)})
        shown = ", ".join(repr(c) for c in bad[:5])
        raise InvalidTopicError(f"topic name '{name}' has illegal characters ({shown}); use [a-zA-Z0-9._-]")
    return name


# Files the data directory keeps per partition, named `<topic>-<partition><suffix>`: the state
# (state/), the writer lock (locks/), the cleaner checkpoint and its temporary copy (state/),
# read_committed's saved walk and its temporary copy (state/, klog.store.txn_cache).
# A 249-character topic (Kafka's limit) would make them longer than a file name may be.
FILE_NAME_BYTES_MAX = 255
PARTITION_FILE_SUFFIXES = (".state", ".lock", ".cleaner", ".cleaner.tmp", ".txnview", ".txnview.tmp")
_LONGEST_SUFFIX_BYTES = max(len(s) for s in PARTITION_FILE_SUFFIXES)
SHORT_PREFIX_CHARS = 200
SHORT_HASH_CHARS = 12


def partition_file_stem(topic: str, partition: int) -> str:
    """The stem of the data directory's files of a partition: `<topic>-<partition>` when its
    longest name fits the file system, else `<first 200 chars>~<12 hex of sha256(topic)>-<partition>`
    ('~' is not legal in a topic name, so a short form never equals a real topic's stem).

    Log directories keep Kafka's `<topic>-<partition>` folder names: those always fit.
    """
    return fit_stem(f"{topic}-{partition}")


def fit_stem(stem: str) -> str:
    """`stem` itself if `stem` + the longest per-partition suffix fits in a file name, else the
    deterministic short form (see partition_file_stem)."""
    if len(stem.encode()) + _LONGEST_SUFFIX_BYTES <= FILE_NAME_BYTES_MAX:
        return stem
    topic, dash, number = stem.rpartition("-")
    if not (dash and number.isdigit()):
        topic, number = stem, ""
    import hashlib  # here: most commands never hash a long name

    digest = hashlib.sha256(topic.encode()).hexdigest()[:SHORT_HASH_CHARS]
    return f"{topic[:SHORT_PREFIX_CHARS]}~{digest}" + (f"-{number}" if number else "")


def fit_partition_file(path: str, suffix: str, fitted: bool = False) -> str:
    """`<dir>/<stem><suffix>` with the stem passed through fit_stem (the one rule every
    per-partition file of the data directory is named by). fitted: the caller passed the stem
    through fit_stem already, and it fit (`path` is returned as it is)."""
    if fitted:
        return path
    assert path.endswith(suffix), (path, suffix)
    cut = path.rfind(os.sep) + 1
    stem = path[cut:len(path) - len(suffix)]
    short = fit_stem(stem)
    return path if short is stem else os.path.join(path[:cut], short + suffix)  # (it fits, as a rule: no join)


def join_name(folder: str, name: str) -> str:
    """os.path.join(folder, name) for a plain name (no separator in it), without join's generality:
    the paths of a partition's files are made for every partition a producer opens."""
    return folder + os.sep + name if folder and folder[-1] != os.sep else os.path.join(folder, name)


def collision_key(name: str) -> str:
    """Kafka's metric-name collision: '.' and '_' are the same."""
    return name.replace(".", "_")


def inside(root: str, *parts: str) -> str:
    """Join parts under root, refusing anything that would resolve outside root."""
    root_real = os.path.realpath(root)
    path = os.path.realpath(os.path.join(root_real, *parts))
    if path != root_real and not path.startswith(root_real + os.sep):
        raise UnsafePathError(f"path '{os.path.join(*parts)}' escapes {root}")
    return path


FILE_MODE = 0o666  # new files: the umask decides (a group-shared store under umask 002 gets 0664)


# O_NOATIME (Linux; 0 elsewhere, or once refused): reads through the descriptor leave the file's
# access time alone. klog never looks at access times, and under relatime (the usual mount) the
# first read of a file written since its last read writes its inode again: every partition's lock
# and state files are written at every append, and read at each writer's first hold (~1.5 us each,
# three or four per partition a producer writes). Only the file's owner may ask: anyone else's
# open fails with EPERM (a group-shared store), and then the process no longer asks.
_noatime = getattr(os, "O_NOATIME", 0)


def open_nofollow(path: str, flags: int, mode: int = FILE_MODE, noatime: bool = False) -> int:
    """os.open that never follows a symbolic link at the last component: a link planted in a
    store (by anyone who can write to it) must not make klog read or clobber another file.
    noatime: the caller's reads need not update the file's access time (see _noatime)."""
    global _noatime
    try:
        if noatime and _noatime:
            try:
                return os.open(path, flags | os.O_NOFOLLOW | _noatime, mode)
            except PermissionError as e:
                if e.errno != errno.EPERM:
                    raise
                _noatime = 0  # not this user's file: opened as before (an EPERM of its own recurs below)
        return os.open(path, flags | os.O_NOFOLLOW, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise SymlinkError(f"{path} is a symbolic link; klog never reads or writes through one") from None
        raise


def nofollow_opener(path: str, flags: int) -> int:
    """For open(..., opener=nofollow_opener)."""
    return open_nofollow(path, flags)


def check_not_symlink(folder: str) -> None:
    """A partition folder must be a real folder inside its log directory (the log directory
    itself may be a link: `klog dirs add` registered where it points)."""
    if os.path.islink(folder):
        raise SymlinkError(f"{folder} is a symbolic link; klog keeps partitions only in real folders of a "
                              f"log directory (register other disks with klog dirs add)")


def fsync_dir(path: str) -> None:
    """Make a new, renamed or removed directory entry durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
