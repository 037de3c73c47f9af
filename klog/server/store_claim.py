"""One `klog serve` per store, as Kafka's `.lock` keeps one broker per log directory.

Local commands (`klog produce`, `consume`, `groups`, ...) share a store with a server safely, but two
servers would each coordinate their own clients: one consumer group split in two (each half given
every partition, so every record processed twice), two transaction coordinators for one
transactional id. So a server holds an exclusive flock on `<store>/serve.lock` while it runs, and a
second one is refused at start with the first one's pid and listeners. The kernel drops the lock when
the holder exits, `kill -9` included: a stale file never blocks the next start.
"""

from __future__ import annotations

import fcntl
import os

from klog.errors import KlogError

SERVE_LOCK = "serve.lock"
HOLDER_BYTES_MAX = 512


class StoreClaim:
    """This process's hold of a store's serve lock."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def describe(self, holder: str) -> None:
        """Say who holds the store (what a refused second server prints)."""
        if self._fd is None:
            return
        data = holder.encode()[:HOLDER_BYTES_MAX]
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # (closing the descriptor drops the flock)
            self._fd = None


def claim_store(path: str) -> StoreClaim:
    """The store's serve lock, or KlogError naming the server that holds it."""
    lock_path = os.path.join(path, SERVE_LOCK)
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        raise KlogError(f"cannot open {lock_path}: {e.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, HOLDER_BYTES_MAX, 0).decode(errors="replace").strip() or "starting"
        os.close(fd)
        raise KlogError(f"another klog serve already serves the store {path} ({holder}): two servers would each "
                        "coordinate their own consumer groups and transactions; stop it first, or serve another "
                        "--data-dir") from None
    except OSError as e:
        os.close(fd)
        raise KlogError(f"cannot lock {lock_path}: {e.strerror}") from None
    return StoreClaim(fd)
