"""A loss of committed records found at recovery, kept until someone acknowledges it.

When recovery finds committed records gone from every replica (a flipped byte found after a
reboot, with one replica), the partition takes no more writes: new records would take the lost
offsets, so a consumer whose committed offset is past them would skip them without a word, and a
script that retries a failed `klog produce` would write twice. A marker file in the leader's folder
says what was lost; every writer refuses the partition while it is there (`klog produce` exits 1,
`klog serve` answers KAFKA_STORAGE_ERROR), naming `klog verify --repair`, which reports the loss and
removes the marker: the loss is acknowledged and writing goes on from the log's end.
"""

from __future__ import annotations

import os

from klog.store.names import fsync_dir, nofollow_opener

MARKER = "klog-data-loss"
ACKNOWLEDGE_COMMAND = "klog verify --repair"


def record(directory: str, message: str) -> None:
    """Keep `message` (what was lost) in `directory`, durably, before anything else is written."""
    path = os.path.join(directory, MARKER)
    tmp = path + ".tmp"
    with open(tmp, "w", opener=nofollow_opener) as f:
        f.write(message + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(directory)


def unacknowledged(directories: list[str]) -> str | None:
    """What the first marker among `directories` says was lost, or None."""
    for directory in directories:
        try:
            with open(os.path.join(directory, MARKER), opener=nofollow_opener) as f:
                return f.read().strip()
        except FileNotFoundError:
            continue
    return None


def acknowledge(directory: str) -> str | None:
    """Remove the marker: writes may go on. Returns what it said, or None if there was none."""
    said = unacknowledged([directory])
    if said is not None:
        os.unlink(os.path.join(directory, MARKER))
        fsync_dir(directory)
    return said
