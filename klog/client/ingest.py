"""Bytes in, records out: the input side of `klog produce` as a library call.

    counts = produce_from(store.producer(), "t", "lines.txt", key_separator=b",")

A source (a path, "-" for stdin, an open file descriptor or a binary stream) is read in 1 MiB
chunks and split into records: one per line (or per `delimiter`), one per JSON envelope line
(`input_format="json"`, what `klog consume --json` writes), or the whole input as one record
(`"raw"`). Errors name the input line (counted across sources) and how many records before it
were written, which were flushed first: nothing read before a bad line is lost.
"""

from __future__ import annotations

import codecs
import errno
import gc
import os
import select
import stat
import sys
from collections.abc import Callable
from typing import IO, Any, NamedTuple

from klog.client.envelope import parse_envelope
from klog.errors import KlogError, RecordTooLargeError, UsageError, log_warning

READ_CHUNK_BYTES = 1 << 20
INPUT_FORMATS = ("lines", "json", "raw")

Source = str | os.PathLike | int | IO[bytes]  # a path, a file descriptor or a binary file

# lines: input lines (records for raw) read, blank JSON lines included; records: handed to the
# producer. Types as values, not class annotations, which NamedTuple would compile (codec.BatchHeader).
IngestCounts = NamedTuple("IngestCounts", [("lines", int), ("records", int)])  # noqa: UP014


def parse_headers(pairs: list[str] | None) -> list[tuple[str, bytes]]:
    """`key=value` texts (produce's -H) as record headers."""
    out = []
    for pair in pairs or []:
        k, eq, v = pair.partition("=")
        if not eq or not k:
            raise UsageError(f"invalid --header '{pair}': use key=value")
        out.append((k, v.encode()))
    return out


def parse_delimiter(text: str) -> bytes:
    """-D's text with backslash escapes (\\n, \\t, \\0, \\xNN, \\\\) as bytes; UTF-8 otherwise."""
    try:
        delim = codecs.escape_decode(text.encode())[0]
    except ValueError as e:
        raise UsageError(f"invalid --delimiter '{text}': {e}") from None
    if not delim:
        raise UsageError("--delimiter cannot be empty (use --input raw for one record)")
    return delim


def check_options(input_format: str, key_separator: bytes | str | None, key: bytes | str | None,
                  delimiter: bytes | str | None) -> None:
    """Raise UsageError for options that do not go together (before any store is opened)."""
    if input_format not in INPUT_FORMATS:
        raise UsageError(f"invalid --input '{input_format}': use lines, json or raw")
    if key_separator is not None and input_format != "lines":
        raise UsageError("--key-separator works with --input lines only")
    if key is not None and (key_separator is not None or input_format == "json"):
        raise UsageError("--key gives every record the same key: not with --key-separator or --input json")
    if delimiter is not None and input_format != "lines":
        raise UsageError("--delimiter works with --input lines only")
    if delimiter is not None and not delimiter:
        raise UsageError("--delimiter cannot be empty (use --input raw for one record)")


class Ingest:
    """One producer's input run over any number of sources: line numbers count across them and a
    partition-fallback warning is given once per (topic, partition)."""

    def __init__(self, producer: Any, topic: str, *, input_format: str = "lines",
                 key_separator: bytes | None = None, key: bytes | None = None, delimiter: bytes | None = None,
                 headers: list[tuple[str, bytes]] | None = None, partition: int | None = None,
                 on_warning: Callable[[str], None] | None = None, encoder: Any = None) -> None:
        """`encoder`: a klog.client.serializers.RecordEncoder the keys and values pass through."""
        check_options(input_format, key_separator, key, delimiter)
        self.producer = producer
        self.topic = topic
        self.input_format = input_format
        self.sep = key_separator or None
        self.key = key
        self.delim = delimiter or b"\n"
        self.headers = headers or None
        self.partition = partition
        self.on_warning = on_warning
        self.encoder = encoder
        self.lines = 0
        self._warned: set[tuple[str, int]] = set()

    def feed(self, source: Source, flush: bool = False) -> None:
        """Read one source to its end into records; flush=True: then write them all (before the
        GC runs again: the buffered records are freed rather than walked once by it, ~0.07 s of
        a keyed produce of 200,000 lines into 1,000 partitions), else call producer.flush()."""
        read, close, name, more_ready = _reader(source)
        # While input keeps coming, the cyclic GC is paused (as the producer's bulk paths do:
        # the record tuples cannot form cycles; paused per call, the GC still walked every
        # batch's tuples once, ~7% of a produce of 1 M lines); it runs whenever input drains.
        gc_on = gc.isenabled()
        try:
            if self.input_format == "raw":
                chunks = []
                while chunk := read():
                    chunks.append(chunk)
                key, value = self.key, b"".join(chunks)
                if self.encoder is not None:
                    [(key, value)] = self._encoded([(key, value)], self.lines + 1)
                self.producer.send(self.topic, value, key=key, headers=self.headers, partition=self.partition)
                self.lines += 1
                return
            delim = self.delim
            pending: list[bytes] = []  # the current line's chunks so far (none holds a delimiter)
            while True:
                chunk = read()
                if not chunk:
                    break
                # a long line grows by appending chunks, joined once: `rest + chunk` per read was
                # quadratic (a 200 MB line took 37 s); the junction is checked for a split delimiter
                junction = pending[-1][-(len(delim) - 1):] if pending and len(delim) > 1 else b""
                if delim not in chunk and delim not in junction + chunk[:len(delim) - 1]:
                    pending.append(chunk)
                    continue
                if len(delim) == 1:  # no delimiter across the junction: split the chunk, not a copy of it
                    lines = chunk.split(delim)
                    if pending:
                        lines[0] = b"".join([*pending, lines[0]])
                else:
                    lines = b"".join([*pending, chunk]).split(delim)
                pending = [lines.pop()]
                self._send_lines(lines)
                drained = len(chunk) < READ_CHUNK_BYTES and not more_ready()
                if drained:
                    # input drained (an interactive pipe): make what we have visible now; a pipe
                    # that is only slower than the disk (`cat file |`, 64 KiB a read) is not
                    # waited on, or acks=all would fsync every 64 KiB
                    self.producer.flush()
                if gc_on and drained:
                    gc.enable()
                elif gc_on:
                    gc.disable()
            rest = b"".join(pending)
            if rest:
                self._send_lines([rest])
            if flush:
                self.producer.flush()
        finally:
            if gc_on:
                gc.enable()
            close()

    def _send_lines(self, lines: list[bytes]) -> None:
        producer = self.producer
        if self.input_format == "json":
            for line in lines:
                self.lines += 1
                if line.strip():
                    self._send_json(line)
            return
        sep, key = self.sep, self.key
        try:
            if self.encoder is not None:
                pairs = [(key, line) for line in lines] if sep is None else [
                    (k, v) if found else (None, k) for k, found, v in map(lambda line: line.partition(sep), lines)]
                producer.send_keyed(self.topic, self._encoded(pairs), headers=self.headers, partition=self.partition)
            elif sep is None and key is None:
                producer.send_values(self.topic, lines, headers=self.headers, partition=self.partition)
            else:
                if sep is None:
                    pairs = [(key, line) for line in lines]
                else:  # (a loop, not a comprehension over partition()'s triples: that builds them all first)
                    pairs = []
                    append = pairs.append
                    for line in lines:
                        line_key, found, value = line.partition(sep)
                        append((line_key, value) if found else (None, line))
                producer.send_keyed(self.topic, pairs, headers=self.headers, partition=self.partition)
        except RecordTooLargeError as e:
            index = getattr(e, "index", None)
            where = self.lines + index + 1 if index is not None else self.lines
            producer.flush()
            raise RecordTooLargeError(f"line {where}: {e}; {producer.records_sent} records before it were written") \
                from None
        self.lines += len(lines)

    def _send_json(self, line: bytes) -> None:
        producer, topic, line_no = self.producer, self.topic, self.lines
        try:
            envelope = parse_envelope(line, self.encoder.fields if self.encoder is not None else ())
        except (ValueError, TypeError) as e:
            producer.flush()
            raise UsageError(f"line {line_no}: malformed JSON input: {e}; "
                             f"{producer.records_sent} records before it were written") from None
        if envelope is None:  # a transaction marker (consume --json --txn-fields): the log's, not a record
            return
        key, value, hdrs, ts, p = envelope
        if self.encoder is not None:
            [(key, value)] = self._encoded([(key, value)], line_no)
        if self.partition is not None:
            p = self.partition
        elif p is not None:
            count = producer.partitions_for(topic)
            if p >= count:
                # a copy into a topic with fewer partitions (an auto-created one has num.partitions):
                # every record still lands, where the partitioner puts it, and the caller hears so once
                if (topic, p) not in self._warned:
                    self._warned.add((topic, p))
                    self._warn(f"line {line_no}: topic '{topic}' has no partition {p} (it has {count}): "
                               "its records go where the partitioner puts them (create the topic with enough "
                               "partitions first, or pass -p, to choose)")
                p = None
        try:
            producer.send(topic, value, key=key, headers=hdrs, partition=p, timestamp=ts)
        except RecordTooLargeError as e:
            producer.flush()
            raise RecordTooLargeError(f"line {line_no}: {e}; {producer.records_sent} records before it were written") \
                from None

    def _encoded(self, pairs: list[tuple[bytes | None, bytes | None]],
                 line_no: int | None = None) -> list[tuple[bytes | None, bytes | None]]:
        """The pairs through self.encoder; at one that does not fit its schema, those before it are
        written and the error names its input line."""
        from klog.client.serializers import EncodeError

        encode = self.encoder.encode
        out = []
        for i, (k, v) in enumerate(pairs):
            field = "key"
            try:
                k = encode("key", k)
                field = "value"
                out.append((k, encode("value", v)))
            except EncodeError as e:
                producer = self.producer
                if out:
                    producer.send_keyed(self.topic, out, headers=self.headers, partition=self.partition)
                producer.flush()
                where = line_no if line_no is not None else self.lines + i + 1
                raise UsageError(f"line {where}: the {field} {e}; {producer.records_sent} records before it were "
                                 "written") from None
        return out

    def _warn(self, message: str) -> None:
        if self.on_warning is not None:
            self.on_warning(message)
        else:
            log_warning(message)


def produce_from(producer: Any, topic: str, *sources: Source, input_format: str = "lines",
                 key_separator: bytes | None = None, key: bytes | None = None, delimiter: bytes | None = None,
                 headers: list[tuple[str, bytes]] | None = None, partition: int | None = None,
                 on_warning: Callable[[str], None] | None = None, encoder: Any = None) -> IngestCounts:
    """Write every source (stdin when none) into `topic` as records and flush: `klog produce`.

    Returns the input lines read and the records written. On an error the records before the bad
    line are flushed and the error says how many there were."""
    ingest = Ingest(producer, topic, input_format=input_format, key_separator=key_separator, key=key,
                    delimiter=delimiter, headers=headers, partition=partition, on_warning=on_warning,
                    encoder=encoder)
    before = producer.records_sent
    try:
        sources = sources or ("-",)
        for i, source in enumerate(sources):
            ingest.feed(source, flush=i == len(sources) - 1)
    except KeyboardInterrupt:
        producer.flush()  # whole records read so far are written; a partial line is not
        raise
    producer.flush()
    return IngestCounts(ingest.lines, producer.records_sent - before)


def _reader(source: Source) -> tuple[Callable[[], bytes], Callable[[], None], str, Callable[[], bool]]:
    """(read one chunk, close, name for messages, whether more input is there without waiting)
    for a path, "-", a descriptor or a stream."""
    if isinstance(source, int):
        name = f"fd {source}"
        return _fd_reader(source, name), _nothing, name, _ready(source)
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if path == "-":
            fd = sys.stdin.fileno()
            return _fd_reader(fd, "stdin"), _nothing, "stdin", _ready(fd)
        fd = _open(path)
        return _fd_reader(fd, path), lambda: os.close(fd), path, _ready(fd)
    stream = getattr(source, "buffer", source)  # a text stream's bytes underneath
    name = str(getattr(stream, "name", "input"))

    def read() -> bytes:
        try:
            return stream.read(READ_CHUNK_BYTES)
        except OSError as e:
            raise KlogError(f"cannot read {name}: {e.strerror}") from None
    return read, _nothing, name, _never


def _ready(fd: int) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            return bool(select.select([fd], [], [], 0)[0])
        except (OSError, ValueError):  # not pollable (or a descriptor number select cannot take)
            return False
    return ready


def _never() -> bool:
    return False


def _fd_reader(fd: int, name: str) -> Callable[[], bytes]:
    def read() -> bytes:
        try:
            return os.read(fd, READ_CHUNK_BYTES)
        except OSError as e:
            raise KlogError(f"cannot read {name}: {e.strerror}") from None
    return read


def _open(path: str) -> int:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise KlogError(f"cannot read {path}: {e.strerror}") from None
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        os.close(fd)
        raise KlogError(f"cannot read {path}: {os.strerror(errno.EISDIR)}")
    return fd


def _nothing() -> None:
    pass
