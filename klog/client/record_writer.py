"""Plain (group-less) reading to a byte stream: what `klog consume` runs into a pipe or a file, beside
delivery.py's loop for a group member or --exec. `line` renders one record as bytes (JSON, a --format
string, the terminal view); None writes each value alone on a line, straight from the batches where the
consumer can give them (no Record objects made).

    with Store() as store:
        write_records(store.consumer("orders"), sys.stdout.buffer)

Cheap to import (the hot consume path loads it): nothing beyond the records' own modules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, BinaryIO

from klog.client.records import Record

WRITE_CHUNK_BYTES = 1 << 20  # one write call never gets more than this (CPython's can return short past 2 GiB)
WRITE_BUFFER_RECORDS = 4096  # rendered records joined into one write (without -f)

Line = Callable[[Record], bytes]


def value_line(r: Record) -> bytes:
    """A record as its value alone on a line (a null value: an empty line)."""
    return (r.value or b"") + b"\n"


def write_all(out: BinaryIO, data: bytes) -> None:
    """Write all of `data` to `out` in bounded chunks, checking each: a short count is retried,
    a zero count is an error (never a silent short output that exits 0)."""
    view = memoryview(data)
    while view:
        chunk = view[:WRITE_CHUNK_BYTES]
        n = out.write(chunk)
        if n is None:  # a non-blocking stream that would block: wait and retry the same bytes
            n = 0
        if n == 0:
            out.flush()
            n = out.write(chunk) or 0
            if n == 0:
                raise OSError(f"stdout accepted none of {len(chunk)} bytes")
        view = view[n:]


def write_records(consumer: Any, out: BinaryIO, line: Line | None = None, as_json: bool = False) -> None:
    """Stream what `consumer` (a local or remote Consumer) reads to `out`, as `line` renders it, else
    as JSON lines (`as_json`), else values alone; flushed whenever the consumer would wait (-f output is
    immediate). The fast paths take whole batches: values joined, or JSON lines a run at a time."""
    if (line is None and not as_json and (len(consumer.cursors) == 1 or consumer.merges_value_chunks)
            and consumer.takes_everything):
        for values in consumer.value_chunks(null=b""):
            if values:
                values.append(b"")  # the last line's newline, without copying the joined chunk
                write_all(out, b"\n".join(values))
                if consumer.follow:
                    out.flush()
        out.flush()
        return
    if (as_json and line is None and not (consumer.merge and len(consumer.cursors) > 1)
            and consumer.gives_record_runs and consumer.takes_everything):
        from klog.client.envelope import json_lines

        for topic, partition, ts_type, records in consumer.record_runs():
            if records:
                write_all(out, json_lines(topic, partition, ts_type, records))
                if consumer.follow:
                    out.flush()
        out.flush()
        return
    write_lines(consumer, out, _line_for(line, as_json), consumer.follow)


def write_newest(newest: list[Record], rest: Any, out: BinaryIO, line: Line | None = None,
                 as_json: bool = False) -> None:
    """--last N: the newest records (klog.client.newest), then with -f the consumer `rest` follows on."""
    write_lines(newest, out, _line_for(line, as_json))
    if rest is not None:
        write_records(rest, out, line, as_json)


def write_lines(records: Iterable[Record], out: BinaryIO, line: Line, follow: bool = False) -> None:
    """Each record as `line` renders it, joined WRITE_BUFFER_RECORDS at a time (each at once with -f)."""
    buf: list[bytes] = []
    try:
        for r in records:
            buf.append(line(r))
            if follow or len(buf) >= WRITE_BUFFER_RECORDS:
                write_all(out, b"".join(buf))
                buf.clear()
                if follow:
                    out.flush()
    except Exception as e:
        if buf and not isinstance(e, OSError):  # a record that cannot be rendered: those before it are out first
            write_all(out, b"".join(buf))
            out.flush()
        raise
    write_all(out, b"".join(buf))
    out.flush()


def _line_for(line: Line | None, as_json: bool) -> Line:
    """`line` where given; else a JSON line or the value alone."""
    if line is not None:
        return line
    if as_json:
        from klog.client.envelope import record_json_line

        return record_json_line
    return value_line
