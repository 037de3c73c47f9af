"""FetchConsumer: the local Consumer's read loop over a cluster's partitions, read by Fetch requests.

The local Consumer reads each partition through a PartitionReader over an object with the
partition's read face (read, log_start_offset, high_watermark, offset_for_timestamp). FetchPartition
is that face over Kafka Fetch requests (fetch.Fetcher), so `klog consume -b` without --group runs the
code a local consume runs: the values-only and JSON fast paths (the store's compiled batch
decoder), the merge by timestamp, -n, --since/--until, -f, and poll_chunks for klog mirror. Its
output is the local store's by construction.

Memory: an answer fetched for a partition with another's read waits for that partition's read;
those kept answers share one bound over every broker, -X fetch.max.bytes (HeldAnswers), and each
partition's answer has its own, -X max.partition.fetch.bytes (Kafka's names; defaults below). A
kept answer is read within KEPT_ANSWER_S or asked again; a seek or a stop gives it up.

read_committed stays on librdkafka (RemoteConsumer): skipping aborted transactions needs the
aborted ranges each Fetch answer lists, which the local reader takes from the store instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from klog.client.consumer import Consumer, PartitionCursor, StartKind
from klog.client.records import Record
from klog.client.remote.fetch import ANSWER_BYTES_MAX, OFFSET_OUT_OF_RANGE, Fetcher, PartitionAnswer
from klog.errors import CorruptLogError, KlogError, UsageError
from klog.protocol.errors import error_name
from klog.store import codec
from klog.store.format import LOG_OVERHEAD, RECORD_BATCH_OVERHEAD
from klog.store.limits import CLUSTER_PARTITION_FETCH_BYTES, MERGED_READ_BYTES_MIN
from klog.store.log import FetchedBatch
from klog.store.txn import READ_UNCOMMITTED
from klog.store.walk import Tail, walk_batches

# max.partition.fetch.bytes default: a partition's share of one Fetch answer (klog's 16 MiB, not
# Kafka's 1 MiB: a partition read alone waits on a round trip per answer)
PARTITION_BYTES = CLUSTER_PARTITION_FETCH_BYTES
# fetch.max.bytes default: Kafka's 50 MiB. Here it bounds every answer kept for reads to come, over
# all the brokers together (Kafka's consumer lets each broker have that much in flight, and keeps
# the completed answers besides): a few round trips of a wide topic's partitions, whatever the
# number of brokers or partitions
FETCH_MAX_BYTES = 50 << 20
SETTINGS = ("fetch.max.bytes", "max.partition.fetch.bytes")  # the -X names, as Kafka's consumer's
# a batch declaring more is damage (the local store's reader stops there too)
PARTITION_BYTES_MAX = 1 << 30
# a kept answer is read at most this long after it was fetched, else asked again: a read from it is
# one whose Fetch took that long, never one of a log as it was minutes ago (a Python consumer polls
# when it likes; a pipe may stall the CLI): records deleted meanwhile, of a topic deleted meanwhile.
# A pass of reads uses its kept answers within a second or so (fetch.max.bytes of them decoded)
KEPT_ANSWER_S = 5.0
# -f: how long the brokers may hold the fetches of all waiting partitions together when nothing is new
FOLLOW_WAIT_MS = 100
RETRY_PAUSE_S = 0.02


def whole_batches(records: bytes, where: str) -> list[FetchedBatch]:
    """The whole batches of a Fetch answer's records, CRC-checked (as the local store checks every
    batch it reads). A batch cut at the end is left out: a broker cuts the last batch of a full
    answer, and the next fetch starts at it."""
    def read(position: int, length: int) -> bytes:
        return records if position == 0 and length >= len(records) else records[position:position + length]

    out: list[FetchedBatch] = []
    try:
        for batch in walk_batches(read, 0, len(records), tail=Tail.STOP, whole=True, chunk_bytes=len(records)):
            header = batch.header
            if not codec.crc_ok(batch.chunk, batch.at, header):
                raise KlogError(f"{where}: the batch at offset {header.base_offset} fails its CRC check")
            # trusted=False: the cluster's log may hold a record attributes byte >= 0x80 (see fastrecords)
            out.append(FetchedBatch(header, batch.data(), 0, batch.position, where, trusted=False))
    except CorruptLogError as e:
        raise KlogError(f"{where}: {e.reason} at offset {e.offset} of the fetched records") from None
    return out


def holds_whole_batch(records: bytes) -> bool:
    """Whether an answer's records start with a whole batch (not only the start of one larger than
    the answer's share); the framing only, whole_batches checks the rest."""
    if len(records) < LOG_OVERHEAD:
        return False
    return LOG_OVERHEAD + int.from_bytes(records[8:LOG_OVERHEAD], "big", signed=True) <= len(records)


def cut_batch_bytes(records: bytes, whole: list[FetchedBatch]) -> int | None:
    """The size the batch cut at the end of `records` declares (`whole`: the whole batches before
    it); None when its length field was cut off too."""
    at = whole[-1].position + len(whole[-1].data) if whole else 0
    if len(records) - at < LOG_OVERHEAD:
        return None
    return LOG_OVERHEAD + int.from_bytes(records[at + 8:at + LOG_OVERHEAD], "big", signed=True)


def fetch_settings(properties: dict[str, str]) -> tuple[int, int]:
    """(fetch.max.bytes, max.partition.fetch.bytes) from the cluster's -X properties, each a
    positive number of bytes (an int32, as in Kafka); one partition's answer is never asked for
    more than all of them may hold."""
    found = []
    for name, default in zip(SETTINGS, (FETCH_MAX_BYTES, PARTITION_BYTES), strict=True):
        text = properties.get(name)
        try:
            value = default if text is None else int(text)
        except ValueError:
            value = 0
        if not 0 < value <= ANSWER_BYTES_MAX:
            raise UsageError(f"{name} must be a number of bytes from 1 to {ANSWER_BYTES_MAX}, not '{text}'")
        found.append(value)
    fetch_max, partition_max = found
    return fetch_max, min(partition_max, fetch_max)


class HeldAnswers:
    """The Fetch answers a cluster consumer keeps for reads to come (fetched with another
    partition's read, or by a follower's long poll), over every broker: at most `limit` bytes
    (fetch.max.bytes); an answer that does not fit is dropped and its partition's read asks again.
    `peak`: the most held at once, counting each fetch's answers from their arrival (before any is
    dropped): what tests bound, at `limit` plus the one fetch in flight."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.peak = 0

    def room(self) -> int:
        return self.limit - self.held

    def arrived(self, answers: Iterable[PartitionAnswer]) -> None:
        """A fetch's answers are in memory beside those held."""
        self.peak = max(self.peak, self.held + sum(len(a.records) for a in answers))

    def take(self, size: int) -> bool:
        """Hold `size` bytes more, if they fit."""
        if self.held + size > self.limit:
            return False
        self.held += size
        return True

    def give(self, size: int) -> None:
        self.held -= size


class FetchPartition:
    """One partition of a cluster, read by Fetch requests, with the face PartitionReader reads.

    `low`/`high` are the log start and high watermark as last seen (ListOffsets at the start, then
    each Fetch answer); `at` is the partition's first offset at the start timestamp, if one was asked.
    `held`: the consumer's bound on kept answers; `max_bytes`: this partition's share of an answer."""

    def __init__(self, fetcher: Fetcher, topic: str, partition: int, low: int, high: int,
                 at: tuple[int, int | None] | None, *, held: HeldAnswers, max_bytes: int) -> None:
        self.fetcher = fetcher
        self.held = held
        self.topic = topic
        self.partition = partition
        self.low = low
        self.high = high
        self._at = at
        # an answer fetched with other partitions' (or a follower's long poll), kept for read():
        # (the offset it is from, the answer, when it came)
        self._kept: tuple[int, PartitionAnswer, float] | None = None
        self._max_bytes = max_bytes
        self.where = f"{topic}-{partition} at {fetcher.store.target.label}"
        # how read() fetches when it has no answer kept: the consumer fetches every partition it
        # is about to read together with this one (FetchConsumer._fetch_together)
        self.fetch_first: Callable[[FetchPartition, int], PartitionAnswer] = FetchPartition._fetch

    def share(self, max_bytes: int) -> None:
        """Ask for at most `max_bytes` an answer (one of many partitions merged by timestamp: each
        holds an answer while the merge waits on it); a batch larger than that is still fetched whole."""
        self._max_bytes = min(self._max_bytes, max_bytes)

    def log_start_offset(self) -> int:
        return self.low

    def high_watermark(self) -> int:
        return self.high

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        if self._at is not None and self._at[0] == timestamp:
            return self._at[1]
        return self.fetcher.store.offsets(self.topic, timestamp).get(self.partition)

    def keep(self, offset: int, answer: PartitionAnswer) -> bool:
        """Keep `answer`, fetched from `offset`, for the next read from there, if the consumer's
        kept answers leave room for it (else the read asks again)."""
        self.drop_kept()
        if not self.held.take(len(answer.records)):
            return False
        self._kept = (offset, answer, time.monotonic())
        return True

    def drop_kept(self) -> None:
        """Give up the answer kept, if any (its read will not come, or asks from elsewhere)."""
        if self._kept is not None:
            self.held.give(len(self._kept[1].records))
            self._kept = None

    def has_answer(self, offset: int) -> bool:
        """An answer kept for the read from `offset`, not older than KEPT_ANSWER_S."""
        kept = self._kept
        return kept is not None and kept[0] == offset and time.monotonic() - kept[2] <= KEPT_ANSWER_S

    def has_news(self, offset: int) -> bool:
        """An answer kept for the read from `offset` holds records or an error (not only that the
        partition is caught up): that read has something without waiting."""
        return self.has_answer(offset) and bool(self._kept[1].records or self._kept[1].error)  # type: ignore[index]

    def read(self, offset: int, max_bytes: int, upper: int | None = None) -> list[FetchedBatch]:
        """Batches holding offsets at or after `offset` (and below `upper`), at least one while the
        partition has records there: a bounded read that gets none retries until the cluster
        timeout and then fails, never a silent short read. (`max_bytes`, the local store's bound
        for one read, is not the one here: a round trip costs more than a file read.)"""
        deadline = time.monotonic() + self.fetcher.store.timeout
        kept = self._kept if self.has_answer(offset) else None
        self.drop_kept()  # (the read takes it over: from here it is the reader's, not held)
        answer = kept[1] if kept is not None else self.fetch_first(self, offset)
        asked_alone: int | None = None  # the size a cut batch was last asked for alone
        while True:
            if answer.error == OFFSET_OUT_OF_RANGE:
                return self._out_of_range(offset)
            if answer.error:
                raise KlogError(f"cannot read {self.where}: {error_name(answer.error)}")
            self.high = answer.high_watermark if answer.high_watermark >= 0 else self.high
            self.low = answer.log_start_offset if answer.log_start_offset >= 0 else self.low
            whole = whole_batches(answer.records, self.where)
            batches = [fb for fb in whole
                       if fb.header.next_offset > offset and (upper is None or fb.header.base_offset < upper)]
            if batches:
                return batches
            if upper is not None and any(fb.header.base_offset >= upper for fb in whole):
                return []  # the broker's next batch is past `upper`: offsets up to it hold none (compaction)
            if answer.records:  # only a cut batch: one larger than the answer's share
                asked_alone = self._whole_batch_bytes(offset, answer.records, whole, asked_alone)
                answer = self._fetch(offset, asked_alone)
                continue
            # a follower reads up to the high watermark the answer gives: an empty answer below it
            # is records owed, waited for as a bounded read waits (not 'caught up': a broker that
            # never sends them would have the follower ask again at once, for ever)
            end = upper if upper is not None else answer.high_watermark
            if end <= offset:
                return []  # caught up (a follower waits for more)
            if time.monotonic() > deadline:
                raise KlogError(f"no records from {self.where} for {self.fetcher.store.timeout:g} s while "
                                f"offsets {offset}..{end - 1} were left to read")
            time.sleep(RETRY_PAUSE_S)
            answer = self._fetch(offset)

    def _whole_batch_bytes(self, offset: int, records: bytes, whole: list[FetchedBatch],
                           asked_alone: int | None) -> int:
        """What to ask for, alone, to get the batch cut at the end of `records` whole: the size it
        declares, whatever the shares (a KIP-74 broker sends a lone partition's first batch whole
        anyway; this gets it from any broker). Once asked for that, a cut again is an error."""
        size = cut_batch_bytes(records, whole)
        if size is not None and size < RECORD_BATCH_OVERHEAD:  # (it would be the answer's bound: 0 or less)
            raise KlogError(f"cannot read {self.where}: the batch at offset {offset} declares {size} bytes, "
                            f"less than a batch's header")
        want = 2 * max(asked_alone or self._max_bytes, len(records)) if size is None else size
        if size is not None and asked_alone is not None and asked_alone >= size:
            raise KlogError(f"cannot read {self.where}: the broker cut the batch at offset {offset} "
                            f"({size} bytes) even when it was asked for alone")
        if want > PARTITION_BYTES_MAX:
            raise KlogError(f"cannot read {self.where}: a batch at offset {offset} is over "
                            f"{PARTITION_BYTES_MAX} bytes")
        return want

    def _fetch(self, offset: int, max_bytes: int | None = None) -> PartitionAnswer:
        """One Fetch of this partition alone (the answer in flight: not held)."""
        answer = self.fetcher.fetch(self.topic, self.partition, offset, max_bytes or self._max_bytes, 0)
        self.held.arrived((answer,))
        return answer

    def _out_of_range(self, offset: int) -> list[FetchedBatch]:
        """OFFSET_OUT_OF_RANGE: below the log start (retention moved it) the reader goes on from the
        new start, as it does locally (an empty answer and a higher log start tell it so)."""
        store = self.fetcher.store
        self.low = store.offsets(self.topic, -2)[self.partition] or 0
        self.high = store.offsets(self.topic, -1)[self.partition] or 0
        if offset < self.low:
            return []
        raise KlogError(f"offset {offset} of {self.where} is out of range (the partition holds "
                        f"{self.low}..{self.high - 1})")


class FetchConsumer(Consumer):
    """The local Consumer over a cluster's partitions (FetchPartition): same arguments, same output.
    Only read_uncommitted (see the module docstring)."""

    def __init__(self, store, topics: list[str], *, isolation_level: str = READ_UNCOMMITTED,  # noqa: ANN001
                 poll_interval_ms: int = 0, record_filter: Callable[[Record], bool] | None = None,
                 **kwargs: object) -> None:
        assert isolation_level == READ_UNCOMMITTED, "read_committed reads go through librdkafka"
        fetch_max, self._partition_bytes = fetch_settings(store.target.properties)
        self.held = HeldAnswers(fetch_max)
        self._fetcher = Fetcher(store)
        self._topic_offsets: dict[str, tuple[dict, dict, dict]] = {}
        try:
            super().__init__(store, topics, record_filter=record_filter, **kwargs)  # type: ignore[arg-type]
        except BaseException:
            self._fetcher.close()
            raise

    def _share_reads(self, share: int) -> None:
        """As the local consumer's, over this partition's Fetch answers (max.partition.fetch.bytes
        each otherwise: 1,000 partitions merged, each holding a read, could hold 16 GB)."""
        for cursor in self.cursors:
            cursor.part.share(max(MERGED_READ_BYTES_MIN, min(self._partition_bytes, share)))  # type: ignore[attr-defined]

    def _cursor(self, topic: str, partition: int) -> PartitionCursor:
        low, high, at = self._offsets(topic)
        found = (self.start.value, at.get(partition)) if self.start.kind is StartKind.TIMESTAMP else None
        part = FetchPartition(self._fetcher, topic, partition, low[partition] or 0, high[partition] or 0, found,
                              held=self.held, max_bytes=self._partition_bytes)
        part.fetch_first = self._fetch_together
        cursor = PartitionCursor(topic, partition, part, self.until_ms, None)  # type: ignore[arg-type]
        cursor.offset = self._start_offset(part, cursor.end())  # type: ignore[arg-type]
        cursor.stop = None if self.follow else cursor.end()
        return cursor

    def _offsets(self, topic: str) -> tuple[dict, dict, dict]:
        """The topic's log starts, ends and (a timestamp start) offsets at the time: ListOffsets once
        a topic, not once a partition."""
        if topic not in self._topic_offsets:
            store = self.store
            at = store.offsets(topic, self.start.value) if self.start.kind is StartKind.TIMESTAMP else {}
            self._topic_offsets[topic] = store.offsets(topic, -2), store.offsets(topic, -1), at
        return self._topic_offsets[topic]

    def _fetch_together(self, asking: FetchPartition, offset: int) -> PartitionAnswer:
        """`asking`'s answer from `offset`, fetched with the next read of every other partition that
        has records left to read and no answer kept: one Fetch per leader broker for all of them (a
        pass of --last over 1,000 partitions, or the first reads of 1,000 merged, is a few round
        trips, not 1,000), all of them together bounded by the room the kept answers leave
        (fetch.max.bytes); with no more room than `asking`'s share, `asking` alone. The others'
        answers that hold a whole batch (or an error) are kept for their reads while they fit; an
        empty one (the bound was reached first) or a cut one is asked again then."""
        room = self.held.room()
        others = self._waiting(asking) if room > asking._max_bytes else []
        if not others:
            return asking._fetch(offset)
        wants = {(asking.topic, asking.partition): (offset, asking._max_bytes)}
        wants.update({(c.topic, c.partition): (c.offset, c.part._max_bytes) for c in others})  # type: ignore[attr-defined]
        answers = self._fetcher.fetch_many(wants, 0, room, retry_others=False)  # (the others' failures: their reads')
        self.held.arrived(answers.values())
        for c in others:
            answer = answers.get((c.topic, c.partition))  # (none: left out once the bound was spent)
            if answer is not None and (answer.error or holds_whole_batch(answer.records)):
                c.part.keep(c.offset, answer)  # type: ignore[attr-defined]
        return answers[(asking.topic, asking.partition)]

    def _waiting(self, asking: FetchPartition) -> list[PartitionCursor]:
        """The cursors other than `asking`'s with records left to read and no answer kept, those
        after it first (the order partitions read one after another come in)."""
        at = next(i for i, c in enumerate(self.cursors) if c.part is asking)
        out = []
        for c in self.cursors[at + 1:] + self.cursors[:at]:
            part: FetchPartition = c.part  # type: ignore[assignment]
            end = c.stop if c.stop is not None else part.high
            if not c.done and c.offset < end and not part.has_answer(c.offset):
                out.append(c)
        return out

    def _wait_for_data(self) -> None:
        """-f: long-poll the partitions not done, together (one Fetch per leader broker), until one
        has records (or an error to report); the answers are kept for the reads that follow. A
        topic deleted meanwhile ends the wait with the broker's error, after its retries."""
        started = time.monotonic()
        while True:
            live = [c for c in self.cursors if not c.done]  # --until stops a partition for good
            if not live or any(c.part.has_news(c.offset) for c in live):  # type: ignore[attr-defined]
                return
            # bounded as _fetch_together's: what does not fit is left to the reads that follow
            answers = self._fetcher.fetch_many({(c.topic, c.partition): (c.offset, c.part._max_bytes)  # type: ignore[attr-defined]
                                                for c in live}, FOLLOW_WAIT_MS, max(1, self.held.room()))
            self.held.arrived(answers.values())
            news = False
            for c in live:
                answer = answers.get((c.topic, c.partition))
                if answer is None:
                    continue
                if answer.records or answer.error:
                    news = True
                elif answer.high_watermark > c.offset:
                    # empty only because the answer's bound was spent first: not caught up, its
                    # read asks again (kept, it would say caught up, and a busy partition before it
                    # in every answer would hold its records back for good)
                    news = True
                    continue
                # (an empty answer of a caught-up partition is kept too: its read needs no fetch)
                c.part.keep(c.offset, answer)  # type: ignore[attr-defined]
            if news:
                return
            # nothing new anywhere: wait on (the empty answers kept say caught up, not news: the
            # wait goes on here, and on_wait sees how long it has been)
            if self.on_wait is not None:
                self.on_wait(time.monotonic() - started)

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self._drop_kept(lambda c: (c.topic, c.partition) == (topic, partition))
        super().seek(topic, partition, offset)

    def read_ranges(self, ranges: dict[tuple[str, int], tuple[int, int]]) -> None:
        self._drop_kept(lambda c: True)  # (a partition not in `ranges` is not read again)
        super().read_ranges(ranges)

    def _stop_partition(self, where: tuple[str, int], offset: int) -> None:
        self._drop_kept(lambda c: (c.topic, c.partition) == where)
        super()._stop_partition(where, offset)

    def _drop_kept(self, which: Callable[[PartitionCursor], bool]) -> None:
        """Give up the answers kept for the cursors `which` picks: their reads will not come from there."""
        for c in self.cursors:
            if which(c):
                c.part.drop_kept()  # type: ignore[attr-defined]

    def poll(self, timeout: float | None = None) -> list[Record]:
        """One fetch from every partition; `timeout` is accepted as RemoteConsumer's (no waiting here)."""
        return super().poll()

    def poll_chunks(self, timeout: float | None = None) -> list[tuple[str, int, list]]:
        return super().poll_chunks()

    def close(self) -> None:
        self._fetcher.close()
