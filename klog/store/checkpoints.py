"""Kafka's checkpoint files (kafka-log-format.md §3): read a broker's, write ones a broker adopts.

Text, one item per line: the version (0), the entry count, then the entries, fields separated
by a space. Written as Kafka's CheckpointFile does: `<name>.tmp`, fsync, rename over `<name>`.

    <log dir>/recovery-point-offset-checkpoint   topic partition offset
    <log dir>/replication-offset-checkpoint      topic partition offset (high watermark)
    <log dir>/log-start-offset-checkpoint        topic partition offset (only above the first segment)
    <partition>/leader-epoch-checkpoint          epoch startOffset
    <partition>/partition.metadata               version: 0 / topic_id: <base64 uuid>
    <log dir>/meta.properties                    version=1, node.id, directory.id, cluster.id
"""

from __future__ import annotations

import base64
import os

from klog.errors import KlogError

VERSION = 0


def _read_entries(path: str, fields: int) -> list[list[str]]:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise KlogError(f"cannot read {path}: {e}") from None
    if len(lines) < 2 or lines[0].strip() != str(VERSION) or not lines[1].strip().isdigit():
        raise KlogError(f"{path}: not a Kafka checkpoint file (version 0, then the entry count)")
    count = int(lines[1])
    # (a blank line splits into nothing: no strip() of each line, ~1,000 per log directory file)
    rows = [split for line in lines[2:] if (split := line.split())]
    if len(rows) != count or not set(map(len, rows)) <= {fields}:  # (no generator: a line per partition)
        raise KlogError(f"{path}: expected {count} entries of {fields} fields")
    return rows


def read_offsets(path: str) -> dict[tuple[str, int], int]:
    """A log directory's `topic partition offset` checkpoint."""
    try:
        return {(t, int(p)): int(o) for t, p, o in _read_entries(path, 3)}
    except ValueError:
        raise KlogError(f"{path}: a partition or offset is not a number") from None


def read_leader_epochs(path: str) -> list[tuple[int, int]]:
    """A partition's `epoch startOffset` entries, in file order."""
    try:
        return [(int(e), int(o)) for e, o in _read_entries(path, 2)]
    except ValueError:
        raise KlogError(f"{path}: an epoch or offset is not a number") from None


def write_atomically(path: str, text: str, sync: bool = True) -> None:
    """A tmp file, fsync, rename over `path`, fsync the folder (Kafka's CheckpointFile.write; the
    tmp name carries the process id, since several klog processes may write at once). sync=False:
    no fsyncs, the caller makes many such files durable at once (one syncfs)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if not sync:
        return
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_path(path: str) -> None:
    """fsync a file written with write_atomically(sync=False), and its folder (the rename)."""
    for target, flags in ((path, os.O_RDONLY), (os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)):
        fd = os.open(target, flags)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def checkpoint_text(entries: list[str]) -> str:
    return _with_header(len(entries), "".join([e + "\n" for e in entries]))


def offsets_text(offsets: dict[tuple[str, int], int]) -> str:
    # (each line made with its newline: not made, then copied again with it; a line per partition)
    return _with_header(len(offsets), "".join([f"{t} {p} {o}\n" for (t, p), o in sorted(offsets.items())]))


def _with_header(count: int, lines: str) -> str:
    """A checkpoint file's text: the version, the entry count, then the entries' lines."""
    return f"{VERSION}\n{count}\n{lines}"


def kafka_uuid(value: str) -> str:
    """A UUID as Kafka prints it: URL-safe base64 of its 16 bytes, without padding."""
    digits = value.replace("-", "")
    raw = b""
    if len(digits) == 32:  # the usual spelling, read without importing uuid (every produce writes this)
        try:
            raw = bytes.fromhex(digits)
        except ValueError:
            pass
    if len(raw) != 16:
        import uuid

        raw = uuid.UUID(value).bytes  # its other spellings ({...}, urn:uuid:), or uuid's error
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")
