"""Produce: each partition's batch is checked and appended as the client encoded it (see
klog.broker.batches); acks 0/1/-1 map onto klog's acks 0/1/all. acks=0 gets no response."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from klog.broker.batches import RawAppendResult
from klog.errors import (
    DuplicateSequenceError,
    InvalidBatchError,
    InvalidProducerEpochError,
    InvalidTimestampError,
    InvalidTopicError,
    InvalidTxnStateError,
    KlogError,
    NotEnoughReplicasError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    StorageError,
    UnknownPartitionError,
    UnknownProducerError,
    UnknownTopicError,
)
from klog.protocol.apis import PRODUCE
from klog.protocol.kafka import E, response_for
from klog.server.context import RequestContext
from klog.server.dispatch import register
from klog.server.produce_response import PartitionResult, ProduceAnswer, single_answer
from klog.store.format import ATTRIBUTES_OFFSET, MAGIC_OFFSET, MAGIC_V2, TRANSACTIONAL_FLAG_MASK
from klog.store.names import INTERNAL_TOPICS

ACKS = {0: "0", 1: "1", -1: "all"}
LAST_MESSAGE_SET_VERSION = 2  # Produce v0-v2: magic 0/1 message sets (Kafka 3.9 serves them, 4.0 does not)
SLICE_ENTRIES = 64  # partition entries handled between two turns of the other connections (~0.3 ms)
# what one job of a connection's pipelined acks=0 requests appends (_acks0_group) while it holds the
# append slots of its partitions: a turn's entries, and about one max.message.bytes batch (what a
# lone request's append holds a partition's slot for)
ACKS0_JOB_ENTRIES = SLICE_ENTRIES
ACKS0_JOB_BYTES = 1 << 20


def error_code(exc: BaseException) -> E:
    """Kafka's error code for what an append raised."""
    if isinstance(exc, InvalidTimestampError):
        return E.invalid_timestamp
    if isinstance(exc, InvalidBatchError):
        return E.corrupt_message if exc.corrupt else E.invalid_record
    if isinstance(exc, NotEnoughReplicasError) and "after appending" in str(exc):
        return E.not_enough_replicas_after_append  # written, but the ISR shrank below min.insync.replicas
    for kind, code in ((RecordTooLargeError, E.message_too_large),
                       (UnknownTopicError, E.unknown_topic_or_partition),
                       (UnknownPartitionError, E.unknown_topic_or_partition),
                       # a name no topic can have is one Kafka's metadata does not hold either
                       # (KafkaApis.handleProduceRequest: not in the metadata cache)
                       (InvalidTopicError, E.unknown_topic_or_partition),
                       (NotEnoughReplicasError, E.not_enough_replicas),
                       (OutOfOrderSequenceError, E.out_of_order_sequence_number),
                       (UnknownProducerError, E.unknown_producer_id),
                       (InvalidProducerEpochError, E.invalid_producer_epoch),
                       (InvalidTxnStateError, E.invalid_txn_state),
                       (DuplicateSequenceError, E.duplicate_sequence_number),
                       (StorageError, E.kafka_storage_error),
                       (OSError, E.kafka_storage_error)):
        if isinstance(exc, kind):
            return code
    return E.unknown_server_error


Outcome = tuple[E, RawAppendResult | None, str | None, int | None]  # code, result, message, bad record


async def _append(ctx: RequestContext, topic: str, partition: int, records: bytes | None, acks: str,
                  txn_check: Any = None) -> Outcome:
    if not records:
        return E.corrupt_message, None, "no record batch", None
    appender = ctx.server.appender
    # v0-v2 carry magic 0/1 message sets: up-converted to a v2 batch in the append's thread
    append = appender.append_message_set if ctx.api_version <= LAST_MESSAGE_SET_VERSION else appender.append
    try:
        async with ctx.server.append_slot(topic, partition):
            # a plain batch into a partition this server is writing: appended here on the loop,
            # its fsync through io_uring (no thread hop); anything else in an append thread
            data = bytes(records)
            started = None if txn_check is not None or ctx.api_version <= LAST_MESSAGE_SET_VERSION else \
                ctx.server.begin_append_on_loop(topic, partition, data, acks)
            if started is None:
                result = await ctx.server.run_append(append, topic, partition, data, acks, txn_check)
            else:
                result = started if isinstance(started, RawAppendResult) else await started
    except (KlogError, OSError) as e:
        return _outcome(ctx, topic, partition, e)
    return _outcome(ctx, topic, partition, result)


def _outcome(ctx: RequestContext, topic: str, partition: int, got: RawAppendResult | BaseException) -> Outcome:
    if not isinstance(got, BaseException):
        ctx.server.notify_appended(topic, partition)
        return E.none, got, None, None
    code = error_code(got)
    if isinstance(got, UnknownTopicError | UnknownPartitionError):
        ctx.store.forget_topic_metadata(topic)  # created or grown by another process since?
    ctx.log.info("produce to %s-%d from %s (client %s): %s: %s", topic, partition, ctx.client_host,
                 ctx.client_id, code.name, got)
    return code, None, str(got), got.record_index if isinstance(got, InvalidBatchError) else None


async def _append_many(ctx: RequestContext, topic: str, items: list[tuple[int, bytes]], acks: str) -> list[Outcome]:
    """The batches of many partitions of `topic` (each named once) in one multi-partition append
    (RawAppender.append_many: one lock acquisition per partition, one metadata check, one syncfs),
    after taking each partition's append slot. Never waiting while it holds one, as Kafka, which
    appends a request's partitions one after another: the partitions free now are appended together,
    then those busy elsewhere (an append in progress, a slow disk's fsync), the first waited for alone
    (taken in partition order, each waited for, a request held partition 0 while it waited for
    partition 1's fsync: another connection's produce of partition 0 waited for a disk it never wrote to)."""
    outcomes: list[Outcome | None] = [None] * len(items)
    left = list(range(len(items)))
    while left:
        slots: dict[int, asyncio.Lock] = {}
        try:
            for i in left:
                slot = ctx.server.append_slot(topic, items[i][0])
                if slots and not _free(slot):
                    continue  # (a later round's)
                await slot.acquire()  # (free: taken at once; the round's first: waited for, holding nothing)
                slots[i] = slot
            now = list(slots)
            got = await ctx.server.run_append(ctx.server.appender.append_many, topic, [items[i] for i in now], acks)
        finally:
            for slot in slots.values():
                slot.release()
        for i, g in zip(now, got, strict=True):
            outcomes[i] = _outcome(ctx, topic, items[i][0], g)
        left = [i for i in left if i not in slots]
    return outcomes  # type: ignore[return-value]


async def produce_group(context_of: Callable[[int], RequestContext], requests: list[Any]) -> list[Any]:
    """Pipelined Produce requests of one connection (klog serve's request loop groups those already
    queued, all of one version) handled as one request: their partitions' batches in one
    multi-partition append per topic (one syncfs for them all, where one request each would cost an
    fsync, a thread hop and a turn of the loop), each answered with its own entries. A partition
    named twice among them appends in request order (produce's serial path); transactional
    requests, or differing acks, are handled one after another; acks=0 ones in jobs of the
    append threads of up to 64 entries each, in request order (_acks0_group: a failed one closes
    the connection, and nothing queued behind it is appended).
    `context_of(i)`: the context of request i, made only where a request is handled on its own (one
    connection: one principal)."""
    from types import SimpleNamespace

    first = requests[0]
    if any(getattr(r, "transactional_id", None) is not None or r.acks != first.acks
           or _has_transactional(r) for r in requests):  # (each refused alone, as Kafka)
        answers: list[Any] = []
        for i, r in enumerate(requests):
            answers.append(await produce(context_of(i), r))
            if answers[-1].__class__ is Acks0Failed:
                # the connection closes on it: Kafka handles nothing queued behind it (an acks=1
                # request appended here would be unanswered, and a retry would write it twice)
                return answers + [answers[-1]] * (len(requests) - len(answers))
        return answers
    if first.acks == 0:
        return await _acks0_group(context_of, requests)
    merged = SimpleNamespace(acks=first.acks, transactional_id=None,
                             topic_data=[t for r in requests for t in r.topic_data])
    ctx = context_of(0)
    outcomes = await produce(ctx, merged, outcomes_only=True)
    answers = []
    at = 0
    for request in requests:
        topics = request.topic_data
        n = len(topics[0].partition_data) if len(topics) == 1 else sum(len(t.partition_data) for t in topics)
        answer = _appended_answer(ctx, request, outcomes[at]) if n == 1 else None
        answers.append(answer if answer is not None else await _answer_of(ctx, request, outcomes[at:at + n]))
        at += n
    return answers


async def _acks0_group(context_of: Callable[[int], RequestContext], requests: list[Any]) -> list[Any]:
    """Pipelined acks=0 Produce requests of one connection (none transactional), appended in jobs
    of the append threads of up to ACKS0_JOB_ENTRIES entries and ACKS0_JOB_BYTES (one thread hop for
    a burst of small requests, where one request each costs a hop and turns of the event loop),
    with Kafka's outcome: Kafka mutes a connection while it handles a request and closes it when
    an acks=0 one fails, so nothing queued behind a failed request is appended, while the other
    entries of the failed request itself are (Kafka appends a request's partitions each on its
    own). What refuses an entry before any append (ACLs, an internal topic, no records) is checked
    here first: the requests behind the first refused one are not handed to the jobs at all. The
    jobs then append entry after entry in request order, each checked as a lone
    request's is (batch, partition, producer state), and stops after the request whose entry failed
    there (a refused batch, or a disk's error during its append): "after" is request order, the
    order Kafka handles them in, whatever their partitions. Answers: None for each request
    appended, the Acks0Failed of the failed one (closing), and it again for those never handled."""
    ctx = context_of(0)
    writable: dict[str, bool] = {}
    work: list[tuple[int, str, int, Any]] = []  # (request, topic, partition, records) to append, in order
    refused: dict[int, list[tuple[str, int, Outcome]]] = {}  # request -> its (topic, partition, outcome) refused here
    last = len(requests) - 1  # the last request handled
    seen = 0
    for r, request in enumerate(requests):
        for topic_data in request.topic_data:
            topic = topic_data.name
            allowed = writable.get(topic)
            if allowed is None:
                allowed = writable[topic] = ctx.authorize("WRITE", "TOPIC", topic)  # ACLs (security.py)
            for pdata in topic_data.partition_data:
                seen += 1
                if seen % SLICE_ENTRIES == 0:
                    await asyncio.sleep(0)  # (requests of many entries: let the other connections in)
                outcome = _refusal(request, "0", topic, allowed, True)
                if outcome is None and not pdata.records:
                    outcome = E.corrupt_message, None, "no record batch", None
                if outcome is None:
                    work.append((r, topic, int(pdata.index), pdata.records))
                else:
                    refused.setdefault(r, []).append((topic, int(pdata.index), outcome))
        if r in refused:
            last = r
            break
    appender = ctx.server.appender
    append = appender.append_message_set if ctx.api_version <= LAST_MESSAGE_SET_VERSION else appender.append

    def append_in_order(chunk: list[tuple[int, str, int, Any]], stop: int) \
            -> tuple[list[RawAppendResult | BaseException], int, Exception | None]:
        """(each entry's result or error, up to where it stopped; the last request to append; what
        broke off the job that no append raises: raised once the outcomes before it are taken)."""
        got: list[RawAppendResult | BaseException] = []
        for r, topic, partition, records in chunk:
            if r > stop:
                break
            try:
                got.append(append(topic, partition, bytes(records), "0"))
            except (KlogError, OSError) as e:
                got.append(e)
                stop = r  # this request's other entries still append (Kafka's), none after it
            except Exception as e:  # noqa: BLE001 - handed to the request loop, which closes the connection
                return got, stop, e
        return got, stop, None

    # in jobs of at most ACKS0_JOB_ENTRIES entries and ACKS0_JOB_BYTES bytes (at least one entry):
    # a job holds the append slot of every partition it names until it ends, so another connection's
    # produce to one of them waits for one job, never for the whole group (7 requests of 19,000
    # entries for one partition in one job held it 15 s). A job never waits while it holds a slot:
    # it ends before an entry whose partition is busy elsewhere (an append in progress there, a slow
    # disk's fsync), and the next job waits for that partition alone (once taken in partition order,
    # each waited for: a job held partition 0 while it waited for partition 1's fsync, and a produce
    # of partition 0 from another connection waited for a disk it never wrote to).
    results: list[RawAppendResult | BaseException] = []
    broke: Exception | None = None
    stop = last
    start = 0
    while start < len(work) and work[start][0] <= stop:
        end, size = start, 0
        slots: dict[tuple[str, int], asyncio.Lock] = {}
        try:
            while end < len(work) and work[end][0] <= stop and end - start < ACKS0_JOB_ENTRIES \
                    and (end == start or size < ACKS0_JOB_BYTES):
                key = (work[end][1], work[end][2])
                if key not in slots:
                    slot = ctx.server.append_slot(*key)
                    if end > start and not _free(slot):
                        break  # (the next job waits for it, holding nothing)
                    await slot.acquire()  # (free: taken at once; the job's first: waited for, holding nothing)
                    slots[key] = slot
                size += len(work[end][3])
                end += 1
            chunk = work[start:end]
            got, stop, broke = await ctx.server.run_append(append_in_order, chunk, stop)
        finally:
            for slot in slots.values():
                slot.release()
        results += got
        if broke is not None or len(got) < len(chunk):
            break
        start = end
    failures: list[tuple[str, int, str]] = []
    failed_at = None
    for done, ((r, topic, partition, _), result) in enumerate(zip(work, results, strict=False)):
        code = _outcome(ctx if not isinstance(result, BaseException) else context_of(r), topic, partition, result)[0]
        if done % SLICE_ENTRIES == SLICE_ENTRIES - 1:
            await asyncio.sleep(0)  # (many entries: let the other connections in)
        if code != E.none:
            failures.append((topic, partition, code.name.upper()))
            failed_at = r
    if broke is not None:
        raise broke
    if failed_at is None and last in refused:
        failed_at = last
    if failed_at is None:
        return [None] * len(requests)
    refusals = [(topic, partition, outcome[0].name.upper()) for topic, partition, outcome in refused.get(failed_at, [])]
    closing = Acks0Failed(refusals + failures)  # (the failed request's: those refused here, then the job's)
    return [None] * failed_at + [closing] * (len(requests) - failed_at)


def _free(slot: asyncio.Lock) -> bool:
    """Whether `slot` is taken at once (its acquire() does not suspend): not held, and nobody waits for it."""
    waiters = getattr(slot, "_waiters", None)  # (asyncio.Lock's own test in acquire())
    return not slot.locked() and all(w.cancelled() for w in waiters or ())


def _transactional(records: Any) -> bool:
    """Whether the first batch of a partition's records is transactional (Kafka's
    RequestUtils.hasTransactionalRecords looks at each partition's first batch)."""
    return (records is not None and len(records) > ATTRIBUTES_OFFSET + 1 and records[MAGIC_OFFSET] == MAGIC_V2
            and bool(records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG_MASK))


def _has_transactional(request: Any) -> bool:
    return any(_transactional(p.records) for t in request.topic_data for p in t.partition_data)


def _txn_allowed(ctx: RequestContext, request: Any, tid: str | None) -> bool:
    """Kafka's first check of a Produce: transactional records need a transactional id the caller
    may Write (else the whole request is TRANSACTIONAL_ID_AUTHORIZATION_FAILED)."""
    return not _has_transactional(request) or (tid is not None and ctx.authorize("WRITE", "TRANSACTIONAL_ID", tid))


def _refusal(request: Any, acks: str | None, topic: str, writable: bool, txn_allowed: bool) -> Outcome | None:
    """Why an entry of `request` for `topic` is refused before any append (None: it may append)."""
    if not txn_allowed:
        return E.transactional_id_authorization_failed, None, None, None
    if acks is None:
        return E.invalid_required_acks, None, f"acks {request.acks} (use 0, 1 or -1)", None
    if not writable:
        return E.topic_authorization_failed, None, None, None
    if topic in INTERNAL_TOPICS:  # the broker's own (__consumer_offsets): Kafka refuses
        return E.invalid_topic_exception, None, f"cannot append to internal topic {topic}", None
    return None


def _txn_check(ctx: RequestContext, tid: str | None, topic: str, partition: int) -> Any:
    """The coordinator's check of a transactional batch, made under the partition's lock."""
    service = getattr(ctx.server, "transactions", None)
    if tid is None or service is None:
        return None
    return lambda header: service.coordinator.check_append(tid, header.producer_id, header.producer_epoch,
                                                           (topic, partition))


async def _produce_one(ctx: RequestContext, request: Any, acks: str | None, topic: str, pdata: Any) -> Any:
    """A Produce of one partition (what most producers send): the general path's checks in its order,
    without its bookkeeping for many entries, answered with one packed entry."""
    writable = ctx.authorize("WRITE", "TOPIC", topic)  # ACLs (security.py)
    tid = getattr(request, "transactional_id", None)  # v3+
    txn_allowed = _txn_allowed(ctx, request, tid)
    index = int(pdata.index)
    outcome = _refusal(request, acks, topic, writable, txn_allowed) or \
        await _append(ctx, topic, index, pdata.records, acks, _txn_check(ctx, tid, topic, index))  # type: ignore[arg-type]
    answer = _appended_answer(ctx, request, outcome)
    return answer if answer is not None else await _answer_of(ctx, request, [outcome])


def _appended_answer(ctx: RequestContext, request: Any, outcome: Outcome) -> Any:
    """The answer of a Produce of one partition whose batch appended (what most producers send):
    its one entry packed at once (single_answer); None for acks=0 (no answer) or any other outcome
    (_answer_of writes those)."""
    result, message = outcome[1], outcome[2]
    if result is None or message is not None or request.acks == 0:
        return None
    topic_data = request.topic_data[0]
    return single_answer(ctx.api_version, topic_data.name, int(topic_data.partition_data[0].index),
                         result.base_offset, result.log_append_time_ms, result.log_start_offset,
                         response_for(request).ProduceResponse)


@register(PRODUCE, 0, 11)  # v10-11 add only tagged answer fields (leader hints on errors), left out
async def produce(ctx: RequestContext, request: Any, outcomes_only: bool = False) -> Any:
    """The answer to `request` (None for acks=0); outcomes_only: its entries' outcomes, in order."""
    acks = ACKS.get(int(request.acks))
    if not outcomes_only and len(request.topic_data) == 1 and len(request.topic_data[0].partition_data) == 1:
        return await _produce_one(ctx, request, acks, request.topic_data[0].name,
                                  request.topic_data[0].partition_data[0])
    work = [(topic_data.name, pdata) for topic_data in request.topic_data for pdata in topic_data.partition_data]
    writable = {t: ctx.authorize("WRITE", "TOPIC", t) for t in {t for t, _ in work}}  # ACLs (security.py)
    internal = {t for t in writable if t in INTERNAL_TOPICS}
    tid = getattr(request, "transactional_id", None)  # v3+
    txn_allowed = _txn_allowed(ctx, request, tid)

    async def one(topic: str, pdata: Any) -> Outcome:
        refused = _refusal(request, acks, topic, writable[topic], txn_allowed)
        if refused is not None:
            return refused
        index = int(pdata.index)
        return await _append(ctx, topic, index, pdata.records, acks, _txn_check(ctx, tid, topic, index))  # type: ignore[arg-type]

    if len(work) == 1:  # (a single-partition producer: nothing to group)
        outcomes: list[Any] = [await one(*work[0])]
    elif len({(t, int(p.index)) for t, p in work}) == len(work):
        # a topic's plain batches (v3+, not transactional) in one multi-partition append; the
        # rest append side by side (their fsyncs overlap in the thread pool)
        many: dict[str, list[int]] = {}
        # (not where the request is refused as a whole: transactional records without a writable id)
        if acks is not None and tid is None and txn_allowed and ctx.api_version > LAST_MESSAGE_SET_VERSION:
            for i, (t, p) in enumerate(work):
                if writable[t] and p.records and t not in internal:
                    many.setdefault(t, []).append(i)
        many = {t: idx for t, idx in many.items() if len(idx) > 1}
        grouped = {i for idx in many.values() for i in idx}
        singles = [i for i in range(len(work)) if i not in grouped]
        appends = [*(one(*work[i]) for i in singles),
                   *(_append_many(ctx, t, [(int(work[i][1].index), bytes(work[i][1].records)) for i in idx], acks)
                     for t, idx in many.items())]
        # one append (a single-partition producer): awaited as it is, no task of its own for gather
        # to make and wait on (two turns of the event loop less per Produce)
        got = [await appends[0]] if len(appends) == 1 else await asyncio.gather(*appends)
        outcomes = [None] * len(work)
        for i, outcome in zip(singles, got, strict=False):
            outcomes[i] = outcome
        for idx, results in zip(many.values(), got[len(singles):], strict=True):
            for i, outcome in zip(idx, results, strict=True):
                outcomes[i] = outcome
    else:  # a partition named twice: its batches in request order
        outcomes = []
        for i, (t, p) in enumerate(work):
            outcomes.append(await one(t, p))
            if i % SLICE_ENTRIES == SLICE_ENTRIES - 1:
                await asyncio.sleep(0)  # a refusal does not suspend: let the other connections in
    if outcomes_only:
        return outcomes
    return await _answer_of(ctx, request, outcomes)


class Acks0Failed:
    """What a Produce with acks=0 answers when any of its entries failed: nothing, and the connection
    closes (Kafka's KafkaApis: the client has no other way to learn, and refreshes its metadata).
    `failures`: (topic, partition, error name) of each entry that failed, for the log line."""

    __slots__ = ("failures",)

    def __init__(self, failures: list[tuple[str, int, str]]) -> None:
        self.failures = failures


async def _answer_of(ctx: RequestContext, request: Any, outcomes: list[Any]) -> Any:
    """The Produce answer of `request` from its entries' outcomes (None for acks=0, or an Acks0Failed
    when an entry failed)."""
    if request.acks == 0:
        if all(outcome[0] == E.none for outcome in outcomes):
            return None
        failed = [(t.name, int(p.index), outcome[0].name.upper())
                  for t, p, outcome in zip((t for t in request.topic_data for _ in t.partition_data),
                                           (p for t in request.topic_data for p in t.partition_data), outcomes,
                                           strict=True) if outcome[0] != E.none]
        return Acks0Failed(failed) if failed else None
    mod = response_for(request)
    # the answer is written entry by entry, by hand (produce_response.py: kio's writer costs ~20 us
    # an entry), yielding to the other connections every SLICE_ENTRIES entries
    results = iter(outcomes)
    answer = ProduceAnswer(ctx.api_version, len(request.topic_data))
    done = 0
    for topic_data in request.topic_data:
        answer.topic(topic_data.name, len(topic_data.partition_data))
        for pdata in topic_data.partition_data:
            done += 1
            if done % SLICE_ENTRIES == 0:
                await asyncio.sleep(0)
            code, result, message, bad_record = next(results)
            # Kafka names the record that made it drop the batch (v8+)
            answer.partition(PartitionResult(
                int(pdata.index), int(code), result.base_offset if result else -1,
                result.log_append_time_ms if result else -1, result.log_start_offset if result else -1,
                () if bad_record is None else ((bad_record, message),), message))
    return answer.finish(mod.ProduceResponse)
