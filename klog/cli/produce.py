"""`klog produce TOPIC [FILE...]`: lines, JSON envelopes or raw input into a topic."""

from __future__ import annotations

import errno
import os
import stat
import sys
from typing import Annotated

import typer

from klog.cli.app import DataDirOpt, open_store
from klog.client.envelope import parse_envelope
from klog.errors import KlogError, RecordTooLargeError, UsageError

READ_CHUNK_BYTES = 1 << 20

ACKS_HELP = ("all: wait until every in-sync replica has fsynced the batch (min.insync.replicas must hold); "
             "1: until the leader has; 0: for no fsync.")


def parse_headers(pairs: list[str] | None) -> list[tuple[str, bytes]]:
    out = []
    for pair in pairs or []:
        k, eq, v = pair.partition("=")
        if not eq or not k:
            raise UsageError(f"invalid --header '{pair}': use key=value")
        out.append((k, v.encode()))
    return out


PRODUCE_HELP = (
    "Write records: one per input line by default (Kafka's default partitioner for keys).\n\n"
    "--input json reads the envelope `klog consume --json` writes (key, value, headers, timestamp, partition), "
    "so `klog consume a --json | klog produce b --input json` copies a topic losslessly. A record whose "
    "partition the topic lacks (a copy into an auto-created topic of num.partitions) goes where the partitioner "
    "puts it, with a warning; create the topic with enough partitions first to keep them. --input raw makes the "
    "whole input one record.\n\n"
    "A missing topic is created with the store's defaults (auto.create.topics.enable) and a note on stderr."
)


def register(app: typer.Typer) -> None:
    @app.command(help=PRODUCE_HELP)
    def produce(
        topic: str,
        files: Annotated[list[str] | None, typer.Argument(help="Input files (stdin when none).")] = None,
        key_separator: Annotated[str | None, typer.Option("--key-separator", "-K",
                                                          help="Split each line into key SEP value.")] = None,
        key: Annotated[str | None, typer.Option("--key", "-k", help="The same key for every record.")] = None,
        delimiter: Annotated[str | None, typer.Option("--delimiter", "-D", help="Records end with DELIM instead of "
                                                      "a newline (kcat's -D; escapes \\n \\t \\0 \\xNN).")]
        = None,
        header: Annotated[list[str] | None, typer.Option("--header", "-H",
                                                         help="Header k=v for every record (repeatable).")] = None,
        input_format: Annotated[str, typer.Option("--input", help="lines | json | raw")] = "lines",
        partition: Annotated[int | None, typer.Option("--partition", "-p", help="Write to this partition.")] = None,
        acks: Annotated[str, typer.Option("--acks", help=ACKS_HELP)] = "all",
        compression: Annotated[str, typer.Option("--compression", "-z",
                                                 help="none, gzip, snappy, lz4 or zstd.")] = "none",
        linger_ms: Annotated[int, typer.Option("--linger-ms", help="Hold a partial batch up to this long.")] = 0,
        batch_size: Annotated[int, typer.Option("--batch-size", help="Bytes per batch.")] = 1_000_000,
        print_offsets: Annotated[bool, typer.Option("--print-offsets",
                                                    help="Print partition and offset of each record.")] = False,
        data_dir: DataDirOpt = None,
    ) -> None:
        if input_format not in ("lines", "json", "raw"):
            raise UsageError(f"invalid --input '{input_format}': use lines, json or raw")
        headers = parse_headers(header)
        sep = key_separator.encode() if key_separator else None
        if sep is not None and input_format != "lines":
            raise UsageError("--key-separator works with --input lines only")
        if key is not None and (sep is not None or input_format == "json"):
            raise UsageError("--key gives every record the same key: not with --key-separator or --input json")
        delim = parse_delimiter(delimiter) if delimiter is not None else b"\n"
        if delimiter is not None and input_format != "lines":
            raise UsageError("--delimiter works with --input lines only")
        fixed_key = key.encode() if key is not None else None

        def on_ack(t: str, p: int, base: int, n: int) -> None:
            if print_offsets:
                sys.stdout.write("".join(f"{t}\t{p}\t{base + i}\n" for i in range(n)))

        def on_create(t: str) -> None:
            print(f"klog: created topic '{t}' with the store's defaults", file=sys.stderr)

        _FALLBACK_WARNED.clear()
        with open_store(data_dir) as store:
            # no ack callback unless offsets are printed: on a cluster it is a Python call per record
            producer = store.producer(acks=acks, compression_type=compression, linger_ms=linger_ms,
                                      batch_size=batch_size, on_ack=on_ack if print_offsets else None,
                                      on_create=on_create)
            sources = files or ["-"]
            line_no = 0
            try:
                for src in sources:
                    line_no = _produce_source(producer, topic, src, input_format, sep, headers, partition, line_no,
                                              delim, fixed_key)
                producer.flush()
            except KeyboardInterrupt:
                producer.flush()  # whole records read so far are written; a partial line is not
                raise
            finally:
                sys.stdout.flush()


def _open_source(src: str) -> int:
    if src == "-":
        return sys.stdin.fileno()
    try:
        fd = os.open(src, os.O_RDONLY)
    except OSError as e:
        raise KlogError(f"cannot read {src}: {e.strerror}") from None
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        os.close(fd)
        raise KlogError(f"cannot read {src}: {os.strerror(errno.EISDIR)}")
    return fd


def _read(fd: int, src: str) -> bytes:
    try:
        return os.read(fd, READ_CHUNK_BYTES)
    except OSError as e:
        raise KlogError(f"cannot read {'stdin' if src == '-' else src}: {e.strerror}") from None


def parse_delimiter(text: str) -> bytes:
    """-D's text with backslash escapes (\\n, \\t, \\0, \\xNN, \\\\) as bytes; UTF-8 otherwise."""
    import codecs

    try:
        delim = codecs.escape_decode(text.encode())[0]
    except ValueError as e:
        raise UsageError(f"invalid --delimiter '{text}': {e}") from None
    if not delim:
        raise UsageError("--delimiter cannot be empty (use --input raw for one record)")
    return delim


def _produce_source(producer, topic: str, src: str, input_format: str, sep: bytes | None,
                    headers: list[tuple[str, bytes]], partition: int | None, line_no: int,
                    delim: bytes = b"\n", key: bytes | None = None) -> int:
    fd = _open_source(src)
    try:
        if input_format == "raw":
            chunks = []
            while chunk := _read(fd, src):
                chunks.append(chunk)
            producer.send(topic, b"".join(chunks), headers=headers or None, partition=partition)
            return line_no + 1
        pending: list[bytes] = []  # the current line's chunks so far (none holds a delimiter)
        while True:
            chunk = _read(fd, src)
            if not chunk:
                break
            # a long line grows by appending chunks, joined once: `rest + chunk` per read was
            # quadratic (a 200 MB line took 37 s); the junction is checked for a split delimiter
            junction = pending[-1][-(len(delim) - 1):] if pending and len(delim) > 1 else b""
            if delim not in chunk and delim not in junction + chunk[:len(delim) - 1]:
                pending.append(chunk)
                continue
            lines = b"".join([*pending, chunk]).split(delim)
            pending = [lines.pop()]
            line_no = _send_lines(producer, topic, lines, input_format, sep, headers, partition, line_no, key)
            if len(chunk) < READ_CHUNK_BYTES:
                producer.flush()  # input drained (an interactive pipe): make what we have visible now
        rest = b"".join(pending)
        if rest:
            line_no = _send_lines(producer, topic, [rest], input_format, sep, headers, partition, line_no, key)
        return line_no
    finally:
        if src != "-":
            os.close(fd)


def _send_lines(producer, topic: str, lines: list[bytes], input_format: str, sep: bytes | None,
                headers: list[tuple[str, bytes]], partition: int | None, line_no: int, key: bytes | None = None) -> int:
    if input_format == "json":
        for line in lines:
            line_no += 1
            if not line.strip():
                continue
            _send_json(producer, topic, line, line_no, partition)
        return line_no
    try:
        if sep is None and key is None:
            producer.send_values(topic, lines, headers=headers or None, partition=partition)
            return line_no + len(lines)
        pairs = []
        for line in lines:
            if sep is None:
                pairs.append((key, line))
            else:
                line_key, found, value = line.partition(sep)
                pairs.append((line_key, value) if found else (None, line))
        producer.send_keyed(topic, pairs, headers=headers or None, partition=partition)
        return line_no + len(lines)
    except RecordTooLargeError as e:
        index = getattr(e, "index", None)
        where = line_no + index + 1 if index is not None else line_no
        producer.flush()
        raise RecordTooLargeError(f"line {where}: {e}; {producer.records_sent} records before it were written") \
            from None


_FALLBACK_WARNED: set[tuple[str, int]] = set()  # (topic, partition) warned about in this run


def _send_json(producer, topic: str, line: bytes, line_no: int, partition: int | None) -> None:
    try:
        key, value, hdrs, ts, p = parse_envelope(line)
    except (ValueError, TypeError) as e:
        producer.flush()
        raise UsageError(f"line {line_no}: malformed JSON input: {e}; "
                         f"{producer.records_sent} records before it were written") from None
    if partition is not None:
        p = partition
    if p is not None and partition is None:
        count = producer.partitions_for(topic)
        if p >= count:
            # a copy into a topic with fewer partitions (an auto-created one has num.partitions):
            # every record still lands, where the partitioner puts it, and stderr says so once
            if (topic, p) not in _FALLBACK_WARNED:
                _FALLBACK_WARNED.add((topic, p))
                print(f"klog: warning: line {line_no}: topic '{topic}' has no partition {p} (it has {count}): "
                      "its records go where the partitioner puts them (create the topic with enough "
                      "partitions first, or pass -p, to choose)", file=sys.stderr)
            p = None
    try:
        producer.send(topic, value, key=key, headers=hdrs, partition=p, timestamp=ts)
    except RecordTooLargeError as e:
        producer.flush()
        raise RecordTooLargeError(f"line {line_no}: {e}; {producer.records_sent} records before it were written") \
            from None
