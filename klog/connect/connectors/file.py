"""Kafka's FileStream connectors (org.apache.kafka.connect.file.*), with their config keys.

The source follows its file — or every file a glob matches — like `tail -F`: a rotated file (a new
inode at the path) is read to its end before the new one is read from its start, a truncated one
(smaller than the position) is read again from its start. Offsets are per file: source partition
{"filename": path}, offset {"position": bytes, "inode": n}. A line is sent once its delimiter is there.
The sink appends each value as a line, optionally rotated by size or age.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time
from typing import Any, BinaryIO

from klog.connect.api import SinkConnector, SinkTask, SourceConnector, SourceTask
from klog.connect.config import ConfigDef
from klog.connect.data import ConnectRecord, primitive
from klog.connect.errors import ConfigError

STRING = primitive("string", optional=False)
READ_BYTES = 1 << 16


def _is_glob(path: str) -> bool:
    return any(c in path for c in "*?[")


class _Followed:
    """One file being followed: its open handle, inode, and the position after the last line sent."""

    def __init__(self, path: str, position: int, inode: int | None) -> None:
        self.path = path
        self.position = position
        self.inode = inode
        self.handle: BinaryIO | None = None
        self.buffer = b""

    def open(self) -> bool:
        try:
            handle = open(self.path, "rb")  # noqa: SIM115 - kept open across polls (a rotated file is finished)
        except FileNotFoundError:
            return False
        st = os.fstat(handle.fileno())
        if self.inode is not None and st.st_ino != self.inode:
            self.position = 0  # a different file than the stored offset's: it was rotated while we were away
        elif st.st_size < self.position:
            self.position = 0  # truncated while we were away
        self.inode = st.st_ino
        handle.seek(self.position)
        self.handle, self.buffer = handle, b""
        return True

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


class FileStreamSourceTask(SourceTask):
    def start(self, props: dict[str, str]) -> None:
        c = FileStreamSourceConnector.config_def.parse(props)
        self.pattern = c["file"]
        self.topic = c["topic"]
        self.batch_size = c["batch.size"]
        self.delimiter = c["delimiter"].encode().decode("unicode_escape").encode()
        self.files: dict[str, _Followed] = {}
        self.last_scan = 0.0
        self.stdin = not self.pattern

    def _scan(self) -> None:
        paths = sorted(glob.glob(self.pattern)) if _is_glob(self.pattern) else [self.pattern]
        for path in paths:
            if path in self.files or (_is_glob(self.pattern) and not os.path.isfile(path)):
                continue
            stored = self.context.offset_storage_reader.offset({"filename": path}) or {}
            f = _Followed(path, int(stored.get("position", 0)), stored.get("inode"))
            if f.open():
                self.files[path] = f

    def poll(self) -> list[ConnectRecord]:
        if self.stdin:
            line = sys.stdin.buffer.readline()
            if not line:
                time.sleep(0.1)
                return []
            return [ConnectRecord(self.topic, None, None, None, STRING, line.rstrip(b"\n").decode(errors="replace"))]
        now = time.monotonic()
        if now - self.last_scan > 0.5:
            self._scan()
            self.last_scan = now
        records: list[ConnectRecord] = []
        for f in list(self.files.values()):
            records.extend(self._read(f, self.batch_size - len(records)))
            if len(records) >= self.batch_size:
                break
        if not records:
            time.sleep(0.05)
        return records

    def _read(self, f: _Followed, limit: int) -> list[ConnectRecord]:
        out: list[ConnectRecord] = []
        if f.handle is None and not f.open():
            return out
        assert f.handle is not None
        while len(out) < limit:
            i = f.buffer.find(self.delimiter)
            if i < 0:
                chunk = f.handle.read(READ_BYTES)
                if chunk:
                    f.buffer += chunk
                    continue
                self._check_moved(f)
                break
            line, f.buffer = f.buffer[:i], f.buffer[i + len(self.delimiter):]
            f.position += i + len(self.delimiter)
            if line.endswith(b"\r") and self.delimiter == b"\n":
                line = line[:-1]
            out.append(ConnectRecord(self.topic, None, None, None, STRING, line.decode(errors="replace"),
                                     source_partition={"filename": f.path},
                                     source_offset={"position": f.position, "inode": f.inode}))
        return out

    def _check_moved(self, f: _Followed) -> None:
        """At the end of the handle: a new file at the path (rotation) or a shorter one (truncation)."""
        try:
            st = os.stat(f.path)
        except FileNotFoundError:
            return  # rotated away, the new one not there yet: keep the old handle until it is
        if st.st_ino != f.inode:
            f.close()
            f.position, f.inode = 0, None
            f.open()
        elif st.st_size < f.position:
            f.handle.seek(0)  # type: ignore[union-attr]
            f.position, f.buffer = 0, b""

    def stop(self) -> None:
        for f in self.files.values():
            f.close()


class FileStreamSourceConnector(SourceConnector):
    java_classes = ("org.apache.kafka.connect.file.FileStreamSourceConnector",)
    short_names = ("file-source",)
    config_def = (ConfigDef().define("file", default="", doc="the file (or glob) to follow; stdin when empty")
                  .define("topic", doc="the topic to write to",  # Kafka's NonEmptyString
                          check=lambda topic: None if topic else "String must be non-empty")
                  .define("batch.size", "int", 2000, at_least=1)
                  .define("delimiter", default="\\n", doc="klog: the record delimiter (default a newline)"))
    task_class = FileStreamSourceTask

    def validate(self, config: dict[str, Any]) -> None:
        if "," in config["topic"]:
            raise ConfigError("topic", config["topic"], "FileStreamSourceConnector writes to one topic")

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.props)]  # one task, as Kafka's


class FileStreamSinkTask(SinkTask):
    def start(self, props: dict[str, str]) -> None:
        c = FileStreamSinkConnector.config_def.parse(props)
        self.path = c["file"]
        self.rotate_bytes = c["file.rotate.bytes"]
        self.rotate_ms = c["file.rotate.ms"]
        self.out: BinaryIO = open(self.path, "ab") if self.path else sys.stdout.buffer  # noqa: SIM115
        self.opened = time.monotonic()

    def put(self, records: list[ConnectRecord]) -> None:
        for r in records:
            value = r.value
            if isinstance(value, dict | list):
                value = json.dumps(value, separators=(",", ":"), default=str)
            elif isinstance(value, bytes):
                value = value.decode(errors="replace")
            self.out.write(f"{value}\n".encode())
            self._maybe_rotate()

    def _maybe_rotate(self) -> None:
        if not self.path:
            return
        too_big = self.rotate_bytes > 0 and self.out.tell() >= self.rotate_bytes
        too_old = self.rotate_ms > 0 and (time.monotonic() - self.opened) * 1000 >= self.rotate_ms
        if too_big or too_old:
            self.out.flush()
            os.fsync(self.out.fileno())
            self.out.close()
            os.replace(self.path, f"{self.path}.{time.strftime('%Y%m%d%H%M%S')}.{time.time_ns() % 10**9:09d}")
            self.out = open(self.path, "ab")  # noqa: SIM115
            self.opened = time.monotonic()

    def flush(self, offsets: dict) -> None:
        self.out.flush()
        if self.path:
            os.fsync(self.out.fileno())

    def stop(self) -> None:
        self.out.flush()
        if self.path:
            self.out.close()


class FileStreamSinkConnector(SinkConnector):
    java_classes = ("org.apache.kafka.connect.file.FileStreamSinkConnector",)
    short_names = ("file-sink",)
    config_def = (ConfigDef().define("file", default="", doc="the file to append to; stdout when empty")
                  .define("file.rotate.bytes", "long", 0, doc="klog: rotate the file past this size (0: never)")
                  .define("file.rotate.ms", "long", 0, doc="klog: rotate the file this often (0: never)"))
    task_class = FileStreamSinkTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.props)]
