"""Fetch answers go to the socket with os.sendfile on the event loop; sendfile of a range that is
not in the page cache waits for the disk there, and every connection waits with it. So the fetch's
worker thread first asks the kernel whether the range is cached (1-byte preadv2 reads with
RWF_NOWAIT, which fail instead of waiting for the disk) and, if it is not, reads it in itself:
a slow or stalled disk then holds that thread and that one fetch, not the loop.

The probes look at one byte per PROBE_STRIDE_BYTES and the last one: the kernel reads files in
ahead by 128 KiB windows, so a range is cold in whole windows. A range evicted between the check
and the sendfile (rare) is sent all the same, as before.
"""

from __future__ import annotations

import os
from typing import Any

PROBE_STRIDE_BYTES = 64 << 10
READ_CHUNK_BYTES = 1 << 20
_probe_buffer = bytearray(1)  # written by preadv, never read: shared by every thread
_nowait = hasattr(os, "preadv") and hasattr(os, "RWF_NOWAIT")  # Linux >= 4.14; elsewhere: sendfile as before


def is_cached(fd: int, position: int, length: int) -> bool:
    """Is every probed page of the range in the page cache? (True where the kernel cannot say.)"""
    global _nowait
    if not _nowait or length <= 0:
        return True
    end = position + length
    probes = list(range(position, end, PROBE_STRIDE_BYTES))
    probes.append(end - 1)
    for offset in probes:
        try:
            os.preadv(fd, [_probe_buffer], offset, os.RWF_NOWAIT)
        except BlockingIOError:
            return False
        except OSError:  # the filesystem does not take RWF_NOWAIT: stop asking
            _nowait = False
            return True
    return True


def load(fd: int, position: int, length: int) -> None:
    """Read the range into the page cache (blocking: call it from a worker thread)."""
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, position, length, os.POSIX_FADV_WILLNEED)  # one request to the disk for it all
    done = 0
    while done < length:
        chunk = os.pread(fd, min(READ_CHUNK_BYTES, length - done), position + done)
        if not chunk:  # the file shrank (retention): the send will notice
            return
        done += len(chunk)


def ensure_cached(byte_range: Any) -> bool:
    """Make a fetch's byte range (klog.store.log.ByteRange) cheap to sendfile from the event loop;
    True if it had to be read in. Blocking: call it from a worker thread."""
    if is_cached(byte_range.fd, byte_range.position, byte_range.length):
        return False
    try:
        load(byte_range.fd, byte_range.position, byte_range.length)
    except OSError:  # an unreadable range: the send reports it (the answer is not decided here)
        return False
    return True
