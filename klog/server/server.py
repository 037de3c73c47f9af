"""The asyncio listener: one task per connection, requests answered in order, one at a time per
connection (Kafka mutes a connection while its request is in flight: responses stay ordered).

`Server` runs in the caller's event loop (`await server.start()`), in a background thread for
tests and embedding (`with Server(...) as s:`), or as the foreground `klog serve` (`run()`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import functools
import gc
import hashlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from klog.protocol import framing
from klog.protocol.apis import API_VERSIONS, PRODUCE, api_name
from klog.protocol.kafka import TopicIds
from klog.protocol.walk import (
    ArrayPastFrame,
    TooManyEntries,
    count_entries,
    with_timedeltas_in_range,
    with_valid_strings,
    without_unknown_tags,
)
from klog.server import dispatch
from klog.server.accept import Acceptor, ConnectionGate, listening_sockets
from klog.server.connection import Begun, FrameProtocol, complete, direct_future
from klog.server.context import BrokerInfo, RequestContext
from klog.server.hop import HopPool, in_thread
from klog.server.limits import (
    AddressShares,
    RateLimitedLog,
    ServeLimits,
    error_response,
    share_of,
    some_listener_authenticates,
)
from klog.server.listeners import Listener, SecurityConfig
from klog.server.produce import Acks0Failed
from klog.server.security import CLOSE_LINGER_MS, SASL_FRAME_BYTES_MAX, ConnectionSecurity, ServerSecurity
from klog.server.throttle import with_throttle
from klog.server.watcher import HighWatermarkWatcher
from klog.store import faults

log = logging.getLogger("klog.serve")

REQUEST_BYTES_MAX = 100 * 1024 * 1024  # socket.request.max.bytes
IDLE_MS_DEFAULT = 600_000  # connections.max.idle.ms
SHUTDOWN_GRACE_S = 5.0
# Kafka's checkpoint files (high watermarks, recovery points, log starts, leader epochs) are
# rewritten this often while serving, as a broker does (replica.high.watermark.checkpoint.interval.ms)
KAFKA_CHECKPOINT_INTERVAL_S = 5.0
_CHECKPOINT_TICK_S = 0.25
# idle idempotent producers' states are dropped this often (Kafka's producer.id.expiration.check.interval.ms),
# at most this many entries looked at a pass (ProducerStates.expire: the oldest first, ~5 ms)
PRODUCER_EXPIRATION_CHECK_S = 600.0
PRODUCER_EXPIRATION_ENTRIES_MAX = 10_000
# a long-polling fetch sees another process's append within this (one state-file read per watched
# partition and tick, whatever the number of fetches waiting: klog/server/watcher.py)
POLL_S = 0.02
# requests larger than this are parsed in the thread pool, and answers to requests of more entries
# than this are encoded there: kio's reader and writer take ~0.4 and ~20 us per entry, a whole
# request at once; in a thread the event loop gets its turn every switch interval (5 ms)
PARSE_INLINE_BYTES = 4096
# ...unless they hold few entries: one partition's batch (librdkafka's Produce of a wide topic, ~10-20
# KB) parses in ~7 us, less than the hop to a parse thread and back costs the loop (~40 us and a
# turn of the event loop). Such a frame is walked on the loop up to PARSE_INLINE_ENTRIES entries (a
# bounded walk, however many it holds) and parsed there if it has no more; up to
# PARSE_INLINE_BYTES_MAX: kio copies the record bytes, and a frame of ~1 MB (one partition's
# requests) cost the loop ~0.5 ms more parsed there than handed to a thread
PARSE_INLINE_ENTRIES = 64
PARSE_INLINE_BYTES_MAX = 64 * 1024
PRODUCE_GROUP_MAX = 64  # pipelined Produce requests of a connection appended as one (one syncfs)
# ...while the group holds less than this many bytes of requests: a group is held, parsed, until it is
# handled, and the requests arriving while it is read (one parsed in a thread) join it: 64 of up to
# socket.request.max.bytes each were 6 GiB (librdkafka's requests of 1 MiB batches still go in fours)
PRODUCE_GROUP_BYTES = 8 << 20
PARSE_THREADS = 2
# the flushes of batches appended on the event loop that io_uring cannot make (a roll's: the sealed
# segment and the folder too; a full ring) run in threads of their own, never the append threads:
# those may all be waiting for partition locks the loop holds until these very flushes are done
# (retention after a roll waits for the next append's lock), which then never ran
FLUSH_THREADS = 2
ENCODE_INLINE_ENTRIES = 1000
ACKS0_FAILURES_LOGGED = 5  # failed partitions named in the line of a failed acks=0 Produce's close
SWITCH_INTERVAL_S = 0.001  # sys.setswitchinterval in the `klog serve` process (see run())


def parse_hostport(text: str, default_port: int = 9092) -> tuple[str, int]:
    """'host:port', ':port', 'host' or '[v6]:port' -> (host, port); ValueError names what is wrong."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = text, str(default_port)
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"invalid port in '{text}' (want HOST:PORT, port 0-65535)")
    return host, int(port)


def cluster_id_for(path: str) -> str:
    """A stable 22-character cluster id (Kafka's base64 UUID form) derived from the store path."""
    digest = hashlib.sha256(os.path.realpath(path).encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


class Server:
    def __init__(self, data_dir: str | None = None, *, listen: tuple[str, int] = ("127.0.0.1", 9092),
                 advertised: tuple[str, int] | None = None, node_id: int = 0, store: Any = None,
                 request_bytes_max: int = REQUEST_BYTES_MAX, idle_ms: int = IDLE_MS_DEFAULT,
                 workers: int = 8, security: SecurityConfig | None = None,
                 offsets_retention_ms: int | None = None, offsets_retention_check_ms: int | None = None,
                 wall_clock: Any = None, limits: ServeLimits | None = None,
                 transactions: dict[str, Any] | None = None, log_cleaner: dict[str, Any] | None = None) -> None:
        """`offsets_retention_ms` and `offsets_retention_check_ms` override the store's
        offsets.retention.minutes and offsets.retention.check.interval.ms (klog.json); `wall_clock`
        (epoch ms) dates commits and their expiry (tests); `transactions`: the transaction
        coordinator's clock, max_timeout_ms and cleanup_interval_ms (tests); `log_cleaner`: the log
        cleaner's retention_check_ms, backoff_ms and compaction (klog/server/log_cleaner.py)."""
        self.data_dir = data_dir
        self.listen = listen
        self.advertised = advertised
        self.node_id = node_id
        self.request_bytes_max = request_bytes_max
        self.idle_ms = idle_ms
        self._own_store = store is None
        self.store = store
        self.workers = workers
        self.executor: HopPool | None = None  # reads, metadata, groups, admin
        # appends run in their own threads, one at most per partition (append_slot): produces stuck
        # on a slow or stalled disk cannot take the threads that Metadata and Fetch answers need
        self.append_executor: HopPool | None = None
        # big requests parsed and big answers encoded here, not in the threads handlers need: many
        # connections sending huge frames queue behind each other, not in front of Metadata
        self.parse_executor: ThreadPoolExecutor | None = None
        self.flush_executor: HopPool | None = None  # see FLUSH_THREADS
        # AlterReplicaLogDirs' moves (each copies a partition, seconds for a big one): one at a time, in
        # a thread of their own, never holding the threads every client's Metadata and groups need
        self.move_executor: HopPool | None = None
        self._append_slots: dict[tuple[str, int], asyncio.Lock] = {}
        self.broker: BrokerInfo | None = None
        self.coordinator: Any = None
        self._group_settings = dict(offsets_retention_ms=offsets_retention_ms,
                                    offsets_retention_check_ms=offsets_retention_check_ms, wall_clock=wall_clock)
        self.handlers = dispatch.load_handlers()
        self.port = 0
        self._connections: dict[asyncio.Task, bool] = {}  # task -> busy with a request
        self._stopping = False
        self._stopped: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # listeners, TLS, SASL, ACLs, quotas (klog/server/security.py); default: one PLAINTEXT `listen`
        self.security_config = security or SecurityConfig()
        self.security: ServerSecurity | None = None
        self.listeners = self.security_config.listeners or [Listener("PLAINTEXT", *listen)]
        self.ports: dict[Listener, int] = {}
        self.brokers: dict[Listener, BrokerInfo] = {}
        # connection and request bounds (klog/server/limits.py, docs/serve-limits.md)
        self.limits = limits or ServeLimits()
        self.limits.validate()
        self.gate = ConnectionGate(self.limits)
        # every unauthenticated client's holding of the pools, together (bounded where some listener authenticates)
        self.address_shares = AddressShares(some_listener_authenticates(self.listeners,
                                                                        self.security_config.ssl_client_auth))
        self._acceptors: list[Acceptor] = []
        self._refusals = RateLimitedLog(log)
        self.appender: Any = None  # klog.broker.batches.RawAppender: every Produce goes through it
        self.loop_fsync: Any = None  # klog.server.loop_fsync.LoopFsync: fsyncs the event loop awaits
        self._flushing: set[asyncio.Task] = set()  # appends begun on the loop, flushed in a thread
        self.transactions: Any = None  # klog.server.transactions.TransactionService
        self._transaction_settings = transactions or {}
        self.topic_ids: TopicIds | None = None  # Fetch v13+ names topics by id
        self.watcher: HighWatermarkWatcher | None = None  # wakes long-polling fetches (one per server)
        self._checkpoints: asyncio.Task | None = None
        self._claim: Any = None  # klog.server.store_claim.StoreClaim: one server per store
        self.producer_expiration_check_s = PRODUCER_EXPIRATION_CHECK_S  # (tests shorten it)
        self._log_cleaner_settings = log_cleaner or {}
        self.log_cleaner: Any = None  # klog.server.log_cleaner.LogCleanerService
        self.offsets_topic: Any = None  # klog.server.offsets_topic.OffsetsTopicService (__consumer_offsets)

    @property
    def stopping(self) -> bool:
        return self._stopping

    # -- appends and the fetches waiting for them ----------------------------------------------
    def notify_appended(self, topic: str | None = None, partition: int = -1) -> None:
        """Wake the fetches waiting on this partition (None: every waiting fetch). Other processes'
        appends are seen by the watcher's poll (klog/server/watcher.py)."""
        assert self.watcher is not None
        self.watcher.notify(None if topic is None else (topic, partition))

    def append_slot(self, topic: str, partition: int) -> asyncio.Lock:
        """The partition's turn to append: produces for a partition whose append is in progress wait
        here, on the event loop, not in a thread blocked on the partition's file lock."""
        slot = self._append_slots.get((topic, partition))
        if slot is None:
            slot = self._append_slots[(topic, partition)] = asyncio.Lock()
        return slot

    async def run_append(self, fn: Any, *args: Any) -> Any:
        """`fn(*args)` in the append threads."""
        return await in_thread(self.append_executor, fn, *args)

    def begin_append_on_loop(self, topic: str, partition: int, records: bytes, acks: str) -> Any:
        """The append of one batch begun here on the event loop, where nothing in it would wait
        (RawAppender.append_begin): its result, or a future of it (completed by the fsync's
        completion through io_uring: no thread, no task); None where the append threads must do
        it. Raises what the append raises."""
        if not self.loop_fsync.available:
            return None
        started = self.appender.append_begin(topic, partition, records, acks)
        if started is None or not hasattr(started, "done"):
            return started
        fut = direct_future(self._loop)
        fds = started.fds
        if fds == []:  # (acks=0, or flush.messages not reached)
            self._appended_on_loop(started, fut, None)
            return fut
        if fds is not None and self.loop_fsync.room(len(fds)):
            try:
                self.loop_fsync.sync_then(fds, functools.partial(self._appended_on_loop, started, fut))
                return fut
            except OSError as e:  # not submitted (nothing queued): the batch is fine, a thread fsyncs it
                log.debug("io_uring submission failed (%s): the fsync goes to a thread", e)
        # more than fsyncs (rare), the ring full, or its submission refused: a thread's
        task = asyncio.ensure_future(self._flush_in_thread(started, fut))
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)
        return fut

    async def _flush_in_thread(self, pending: Any, fut: asyncio.Future) -> None:
        error: OSError | None = None
        try:
            await in_thread(self.flush_executor, pending.flush)  # (never waits for a lock: see FLUSH_THREADS)
        except OSError as e:
            error = e
        except Exception as e:  # noqa: BLE001 - whatever the flush raised, done() must run: it holds the locks
            error = OSError(errno.EIO, f"flush failed: {e}")
        self._appended_on_loop(pending, fut, error)

    def _appended_on_loop(self, pending: Any, fut: asyncio.Future, error: OSError | None) -> None:
        """The fsyncs of a batch appended on the loop are done: publish it (whether or not its
        producer still waits: the locks must go) and answer."""
        try:
            result = pending.done(error)
        except BaseException as e:  # noqa: BLE001 - the append's error is the producer's answer
            complete(fut, error=e)
            return
        try:
            faults.point("loop-append-published")  # (tests: a kill -9 between the publish and the answer)
            if pending.rolled:  # retention after a new segment reads and deletes files: a thread's work
                self.append_executor.submit(self.appender.writer.after_roll, pending.topic, pending.partition)
            if pending.to_release:  # closing may wait for a sealed segment's background fsync
                self.append_executor.submit(self.appender.writer.release_files, pending.to_release)
        finally:  # (the batch is published: whatever the follow-up work raised, e.g. a pool shut
            # down, the producer is answered and the future leaves connection._direct)
            complete(fut, result)  # (last: the producer's answer may be written from here)

    async def _read_marks(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
        """The high watermarks of these partitions, read in the thread pool (one state-file pread each)."""
        def read() -> dict[tuple[str, int], int | None]:
            from klog.errors import KlogError

            out: dict[tuple[str, int], int | None] = {}
            for topic in {topic for topic, _ in keys}:  # once per topic, not per partition
                with contextlib.suppress(KlogError, OSError):
                    self.appender.check_topic(topic)
            for topic, index in keys:
                try:
                    out[(topic, index)] = self.appender.partition(topic, index).snapshot().high_watermark
                except (KlogError, OSError):
                    out[(topic, index)] = None
            return out

        return await asyncio.get_running_loop().run_in_executor(self.executor, read)

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        if self.store is None:
            from klog.client.store import Store

            self.store = Store(self.data_dir, on_warning=lambda m: log.warning("%s", m))
        from klog.server.store_claim import claim_store

        try:
            self._claim = claim_store(self.store.path)
        except BaseException:
            if self._own_store:
                self.store.close()
                self.store = None
            raise
        try:
            await self._start_claimed()
        except BaseException:
            # whatever failed (a TLS key that does not load, a listener's address in use, a service's
            # start-up): nothing stays open, and the store is free again, in a process that lives on
            # (an embedding that fixes its configuration and starts another Server on the same store)
            try:
                await self.stop()
            finally:
                if self._own_store and self.store is not None:
                    self.store.close()
                    self.store = None
                self._claim.release()
            raise

    async def _start_claimed(self) -> None:
        """start() once this server holds the store's serve lock."""
        assert self.store is not None
        self._stopped = asyncio.Event()  # (first: stop() closes what a failed start made)
        self._loop = asyncio.get_running_loop()
        self.executor = HopPool(self.workers, thread_name_prefix="klog-serve")
        self.append_executor = HopPool(self.workers, thread_name_prefix="klog-serve-append")
        self.flush_executor = HopPool(FLUSH_THREADS, thread_name_prefix="klog-serve-flush")
        self.move_executor = HopPool(1, thread_name_prefix="klog-serve-move")
        self.parse_executor = ThreadPoolExecutor(PARSE_THREADS, thread_name_prefix="klog-serve-parse")
        self.security = ServerSecurity(self.security_config, self.store)
        for lst in self.listeners:  # (address in use, unknown host, a TLS key that does not load: start() closes)
            tls = self.security.ssl_context() if lst.tls else None
            socks = listening_sockets(lst.host, lst.port)
            self._acceptors += [Acceptor(sock, self.gate, functools.partial(self._protocol, lst), tls)
                                for sock in socks]
            self.ports[lst] = socks[0].getsockname()[1]
        for acceptor in self._acceptors:
            acceptor.start()
        self.port = self.ports[self.listeners[0]]
        self._claim.describe(f"pid {os.getpid()}, listening on " + ", ".join(
            f"{lst.host}:{self.ports[lst]}" for lst in self.listeners))
        cluster_id = cluster_id_for(self.store.path)
        # listening on every interface: advertise this machine's name, as Kafka does (clients elsewhere
        # cannot use 0.0.0.0); --advertised-listener overrides it for the first listener
        for i, lst in enumerate(self.listeners):
            adv_host, adv_port = (self.advertised if i == 0 and self.advertised else
                                  (lst.host if lst.host not in ("0.0.0.0", "::", "") else
                                   (self.advertised[0] if self.advertised else socket.getfqdn()), self.ports[lst]))
            self.brokers[lst] = BrokerInfo(self.node_id, adv_host, adv_port or self.ports[lst], cluster_id)
        self.broker = self.brokers[self.listeners[0]]
        self.coordinator = self._make_coordinator()
        from klog.broker.batches import RawAppender

        self.appender = RawAppender(self.store, warn=lambda m: log.warning("%s", m))
        from klog.server.loop_fsync import LoopFsync

        self.loop_fsync = LoopFsync(self._loop)
        from klog.server.transactions import TRANSACTIONAL_IDS_POOL, TransactionService

        settings = {"principal_ids_max": share_of(TRANSACTIONAL_IDS_POOL, self.limits.client_share),
                    "addresses": self.address_shares,
                    **self._transaction_settings}
        self.transactions = TransactionService(self.store, self.appender, self.executor, **settings)
        self.transactions.start()  # completes what a crash left half-done, then aborts abandoned transactions
        self.watcher = HighWatermarkWatcher(self._read_marks, POLL_S)
        self.topic_ids = TopicIds(self.store)
        self._checkpoints = asyncio.create_task(self._write_kafka_checkpoints())
        from klog.server.log_cleaner import LogCleanerService

        self.log_cleaner = LogCleanerService(self.store, check_topic=self.appender.check_topic,
                                             **self._log_cleaner_settings)
        self.log_cleaner.start()
        from klog.server.offsets_topic import OffsetsTopicService

        self.offsets_topic = OffsetsTopicService(self.store, self.appender.writer, notify=self.notify_appended)
        self.offsets_topic.start()

    async def _write_kafka_checkpoints(self) -> None:
        """Every KAFKA_CHECKPOINT_INTERVAL_S, Kafka's checkpoint files (only changed ones are rewritten)."""
        loop = asyncio.get_running_loop()
        last = expired_at = loop.time()
        while not self._stopping:
            await asyncio.sleep(_CHECKPOINT_TICK_S)
            if not self._stopping and loop.time() - expired_at >= self.producer_expiration_check_s:
                expired_at = loop.time()
                await self._expire_producer_states()
            if self._stopping or loop.time() - last < KAFKA_CHECKPOINT_INTERVAL_S:
                continue
            last = loop.time()
            try:
                await loop.run_in_executor(self.executor, self.store.write_kafka_checkpoints)
            except Exception as e:  # noqa: BLE001 - a checkpoint failure must never stop the server
                log.warning("cannot update Kafka's checkpoint files: %s", e)

    async def _expire_producer_states(self) -> None:
        """Drop idle idempotent producers' states (klog.broker.batches.ProducerStates.expire)."""
        producers = self.appender.producers
        try:
            dropped = await asyncio.get_running_loop().run_in_executor(
                self.executor, producers.expire, PRODUCER_EXPIRATION_ENTRIES_MAX)
        except Exception as e:  # noqa: BLE001 - the next pass tries again; serving goes on
            log.warning("producer state expiration: %s: %s", type(e).__name__, e)
            return
        if dropped:
            log.info("dropped the state of %d idempotent producers idle for %d ms (%d kept)", dropped,
                     producers.expiration_ms, len(producers))
        evicted, producers.evicted = producers.evicted, 0  # (a count missed meanwhile is only a log line's)
        if evicted:
            log.warning("dropped the state of %d idempotent producers past the bounds (%d a partition, %d in all) "
                        "since the last check: many new producer ids; those writing again get UNKNOWN_PRODUCER_ID",
                        evicted, producers.per_partition_max, producers.total_max)

    def _make_coordinator(self) -> Any:
        from klog.server.group_runtime import GroupCoordinator

        coordinator = GroupCoordinator(self.store, self.broker, self.executor, client_share=self.limits.client_share,
                                       addresses=self.address_shares, **self._group_settings)
        coordinator.start_expiry()
        return coordinator

    def startup_line(self) -> str:
        assert self.broker is not None and self.store is not None
        dirs = ", ".join(self.store.data_dir.log_dir_path(d) for d in self.store.log_dir_ids())
        listening = ", ".join(("" if lst.protocol == "PLAINTEXT" else f"{lst.protocol}://") +
                              f"{lst.host}:{self.ports[lst]}" for lst in self.listeners)
        return (f"klog serve: listening on {listening} (advertised "
                f"{self.broker.host}:{self.broker.port}, node {self.node_id}); store {self.store.path}; "
                f"log dirs {dirs}")

    async def stop(self) -> None:
        """Stop accepting, let requests in flight finish (bounded), close connections and the store."""
        if self._stopping:
            return
        self._stopping = True
        for acceptor in self._acceptors:
            acceptor.close()
        if self._checkpoints is not None:
            self._checkpoints.cancel()
        if self.watcher is not None:
            self.watcher.close()  # long-polling fetches answer now with what they have
        for task, busy in list(self._connections.items()):
            if not busy:
                task.cancel()
        if self._connections:
            _, pending = await asyncio.wait(list(self._connections), timeout=SHUTDOWN_GRACE_S)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        if self.log_cleaner is not None:
            await self.log_cleaner.close()
        if self.offsets_topic is not None:
            await self.offsets_topic.close()
        if self.transactions is not None:
            await self.transactions.close()
        if self.coordinator is not None and hasattr(self.coordinator, "close"):
            result = self.coordinator.close()
            if asyncio.iscoroutine(result):
                await result
        if self._flushing:
            await asyncio.wait(list(self._flushing), timeout=SHUTDOWN_GRACE_S)
        if self.loop_fsync is not None:
            await self.loop_fsync.close()
        if self.executor is not None:
            self.executor.shutdown(wait=True)
        if self.append_executor is not None:
            self.append_executor.shutdown(wait=True)
        if self.flush_executor is not None:
            self.flush_executor.shutdown(wait=True)
        if self.move_executor is not None:
            self.move_executor.shutdown(wait=True)
        if self.parse_executor is not None:
            self.parse_executor.shutdown(wait=True)
        if self.security is not None:
            self.security.close()
        if self._own_store and self.store is not None:
            self.store.close()  # flushes and closes every partition it opened
        if self._claim is not None:
            self._claim.release()  # (last: another server may start once the store is closed)
        assert self._stopped is not None
        self._stopped.set()

    async def wait_stopped(self) -> None:
        assert self._stopped is not None
        await self._stopped.wait()

    # -- foreground (klog serve) -------------------------------------------------------------
    def run(self, on_started: Any = None) -> None:
        """Serve until SIGTERM or SIGINT, then stop cleanly."""
        # the event loop shares the interpreter with the parse, encode and handler threads: when one
        # of them is busy (a big request), the loop waits up to the switch interval for the GIL at
        # every wake-up, and a small request needs several. 1 ms instead of Python's 5 ms bounds
        # what a connection sending big requests adds to everyone else's latency (issue 23)
        sys.setswitchinterval(SWITCH_INTERVAL_S)

        async def main() -> None:
            await self.start()
            # what start-up made (modules, kio's types, the store) lives as long as the server: kept
            # out of the collector's generations, whose full collections would otherwise walk it all
            # again and again while requests come
            gc.collect()
            gc.freeze()
            if on_started is not None:
                on_started(self)
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, lambda: asyncio.ensure_future(self.stop()))
            await self.wait_stopped()

        asyncio.run(main())

    # -- background thread (tests, embedding) ------------------------------------------------
    def __enter__(self) -> Server:
        ready = threading.Event()
        failure: list[BaseException] = []

        def target() -> None:
            async def main() -> None:
                try:
                    await self.start()
                except BaseException as e:
                    failure.append(e)
                    ready.set()
                    return
                ready.set()
                await self.wait_stopped()

            asyncio.run(main())

        self._thread = threading.Thread(target=target, name="klog-serve-loop", daemon=True)
        self._thread.start()
        if not ready.wait(30):
            raise TimeoutError("klog serve did not start within 30 s")
        if failure:
            raise failure[0]
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._thread is None or self._loop is None:
            return
        future = asyncio.run_coroutine_threadsafe(self.stop(), self._loop)
        future.result(timeout=SHUTDOWN_GRACE_S + 10)
        self._thread.join(timeout=10)
        self._thread = None

    # -- connections -------------------------------------------------------------------------
    def _protocol(self, listener: Listener) -> FrameProtocol:
        """A new connection's protocol (klog/server/connection.py): frames cut as bytes arrive."""
        proto: FrameProtocol

        def size_problem(size: int) -> str | None:
            authenticated = proto.security.authenticated if proto.security is not None else not listener.sasl
            if not authenticated and size > SASL_FRAME_BYTES_MAX:
                return f"request of {size} bytes before SASL authentication (at most {SASL_FRAME_BYTES_MAX})"
            if size < framing.PREFIX.size or size > self.request_bytes_max:
                return f"invalid request size {size} (socket.request.max.bytes is {self.request_bytes_max})"
            return None

        proto = FrameProtocol(functools.partial(self._connection, listener=listener), size_problem)
        return proto

    async def _connection(self, proto: FrameProtocol, listener: Listener | None = None) -> None:
        writer = proto.writer
        assert writer is not None
        task = asyncio.current_task()
        assert task is not None
        peer = writer.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) else str(peer)
        if self._stopping:
            self.gate.release(host)
            writer.close()
            return
        self._connections[task] = False
        peer_text = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        log.info("connection from %s", peer_text)
        assert self.security is not None
        # carried with the connection, never looked up by address: one client port may hold
        # connections to two listeners at once (Linux shares a local port across destinations)
        conn = self.security.connection(listener or self.listeners[0], peer_text.rpartition(":")[0], writer.transport)
        proto.security = conn  # its frame-size bound before SASL (size_problem)
        proto.close_when_idle(self.idle_ms / 1000)
        try:
            await self._serve_connection(proto, writer, task, peer_text, conn)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception as e:  # a bug in a handler must not take the server down
            log.error("%s: closing connection after an internal error: %s: %s", peer_text, type(e).__name__, e)
        finally:
            self._connections.pop(task, None)
            self.gate.release(host)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)
            log.info("connection from %s closed", peer_text)

    async def _serve_connection(self, proto: FrameProtocol, writer: asyncio.StreamWriter, task: asyncio.Task,
                                peer: str, conn: ConnectionSecurity) -> None:
        """Requests handled and answered strictly in order; the protocol holds the next frames
        meanwhile (pipelining), each parsed when its turn comes (a SASL handshake before it may
        change how it is read). A request arriving while this loop waits, with nothing else
        queued, is begun as it arrives (start_eagerly): one turn of the event loop less."""

        def start_eagerly(frame: bytes) -> Coroutine[Any, Any, bool] | None:
            # not: a raw SASL token or a big frame (their parse differs), nor once stopping (no new request)
            if self._stopping or len(frame) > PARSE_INLINE_BYTES or (conn.raw_sasl and not conn.authenticated):
                return None
            return self._request(frame, proto, writer, task, peer, conn)

        proto.start_eagerly = start_eagerly
        try:
            while not self._stopping:
                frame = await proto.next_frame()
                if frame is None:
                    if proto.idled and not proto.end_reason:
                        log.info("%s: idle for %d ms (connections.max.idle.ms), closing", peer, self.idle_ms)
                    elif proto.end_reason:
                        log.warning("%s: %s, closing", peer, proto.end_reason)
                    return
                if isinstance(frame, Begun):  # begun as it arrived: its outcome
                    if not await frame:
                        return
                elif not await self._request(frame, proto, writer, task, peer, conn):
                    return
        finally:
            proto.start_eagerly = None

    async def _request(self, frame: bytes, proto: FrameProtocol, writer: asyncio.StreamWriter, task: asyncio.Task,
                       peer: str, conn: ConnectionSecurity) -> bool:
        """The request in `frame` handled and answered (with the Produce requests queued behind it
        that join it); False: the connection must close. Run by the request loop, or begun in
        FrameProtocol.data_received when it arrived while the loop waited (nothing in it may need
        the current task or a context variable: there is none)."""
        self._connections[task] = proto.busy = True
        try:
            if conn.raw_sasl and not conn.authenticated:
                item = raw_sasl_token(frame)  # after a SaslHandshake v0: a SASL token without Kafka's framing
            else:
                item = await self._parsed(frame, peer)
            # pipelined Produce requests (none queued behind this one: answered as any request)
            while item is not None and proto.has_frames() and self._groupable(item, conn):
                group, item = await self._produce_group(item, proto, peer)
                if not await self._answer_group(group, writer, peer, conn):
                    return False
                if item is None or item is _NO_ITEM:
                    break
            # (stopping: the loop ends after this request, whoever ran it)
            if item is _NO_ITEM:
                return not self._stopping
            return item is not None and await self._answer(item, writer, peer, conn) and not self._stopping
        finally:
            self._connections[task] = proto.busy = False
            proto.last_active = self._loop.time()

    async def _parsed(self, frame: bytes, peer: str) -> _Parsed | None:
        """The request in `frame` (None: the connection must close), parsed on the loop when that is
        cheap (_parse_on_loop), else in the parse threads while the loop keeps answering the others."""
        item = self._parse_on_loop(frame, peer)
        if item is _IN_THREAD:
            item = await self._loop.run_in_executor(self.parse_executor, self._parse, frame, peer)
        return item

    def _parse_on_loop(self, frame: bytes, peer: str) -> Any:
        """The request in `frame` parsed here when it is small or holds few entries, or None (the
        connection must close); _IN_THREAD: parse it in the parse threads (_parse)."""
        if len(frame) <= PARSE_INLINE_BYTES:
            return self._parse(frame, peer)
        if len(frame) <= PARSE_INLINE_BYTES_MAX:
            return self._parse(frame, peer, PARSE_INLINE_ENTRIES)
        return _IN_THREAD

    def _parse(self, frame: bytes, peer: str, entries_here: int | None = None) -> Any:
        """The request in `frame`, or None (logged) when the connection must close; _IN_THREAD
        when it holds more than `entries_here` entries (given: counted up to that many only)."""
        prefix = framing.read_prefix(frame)
        log.debug("%s: request key %d v%d #%d", peer, prefix.api_key, prefix.api_version, prefix.correlation_id)
        if not dispatch.supports(prefix.api_key, prefix.api_version):
            if prefix.api_key == API_VERSIONS:
                return _Parsed(prefix, None, None)  # answered in v0 with UNSUPPORTED_VERSION
            # at the default level: the client only sees a closed connection (Kafka closes too)
            log.warning("%s (client %s): %s v%d is not supported (klog serve accepts %s), closing", peer,
                        framing.client_id_of(frame), api_name(prefix.api_key), prefix.api_version,
                        dispatch.accepted(prefix.api_key))
            return None
        try:
            # every request, however small: its arrays' counts are checked against the bytes left
            # before kio's reader allocates room for them (ArrayPastFrame)
            bound = self.limits.max_request_entries
            here = entries_here is not None and entries_here < bound
            limit = entries_here if here else bound
            try:  # (a header's tagged fields are bounded as entries: their walk costs alike)
                try:
                    client_id, body_at, schema = framing.parse_header(frame, prefix, limit)
                except framing.InvalidUtf8:
                    frame = _read_as_kafka(framing.with_valid_client_id(frame), peer, "the client id", prefix)
                    client_id, body_at, schema = framing.parse_header(frame, prefix, limit)
            except TooManyEntries:
                if here:
                    return _IN_THREAD
                # (no client sends any: header v2 defines none)
                raise framing.FrameError(f"a request header of more than {limit} tagged fields") from None
            try:
                entries = count_entries(frame, body_at, schema, limit)
            except TooManyEntries:
                if not here:
                    raise  # (refused, below)
                return _IN_THREAD
            try:
                request = framing.parse_body(frame, body_at, schema, prefix.api_version)
            except framing.InvalidUtf8:
                frame = _read_as_kafka(with_valid_strings(frame, body_at, schema), peer,
                                       f"a string of {schema.__name__}", prefix)
                request = framing.parse_body(frame, body_at, schema, prefix.api_version)
            except framing.FrameError as e:
                # tagged fields the schema does not know are skipped, as Kafka skips them (kio refuses them)
                # and a timedelta_i64 past what kio reads (Kafka reads any long) is read as its bound
                text = str(e)
                without = (without_unknown_tags(frame, body_at, schema) if "tagged field" in text else
                           with_timedeltas_in_range(frame, body_at, schema) if "milliseconds overflow" in text
                           else None)
                if without is None:
                    raise
                request = framing.parse_body(without, body_at, schema, prefix.api_version)
        except framing.FrameError as e:
            log.warning("%s (client %s): %s, closing", peer, framing.client_id_of(frame), e)
            return None
        except ArrayPastFrame as e:
            log.warning("%s (client %s): cannot parse %s v%d: %s, closing", peer, framing.client_id_of(frame),
                        schema.__name__, prefix.api_version, e)
            return None
        except TooManyEntries:
            # refused before kio parses it: parsing holds the interpreter, every connection waits
            message = (f"{schema.__name__} v{prefix.api_version} has more than {self.limits.max_request_entries} "
                       "entries (klog serve --max-request-entries)")
            self._refusals.warning("%s (client %s): %s, refused", peer, framing.printable(client_id), message)
            if prefix.api_key == PRODUCE and _produce_acks(frame, body_at, schema) == 0:
                return None  # acks=0 expects no answer: closing is the only refusal it sees
            return _Parsed(prefix, client_id, None, len(frame), refusal=message)
        return _Parsed(prefix, client_id, request, len(frame), entries=entries)

    async def _answer(self, item: _Parsed, writer: asyncio.StreamWriter, peer: str, conn: ConnectionSecurity) -> bool:
        """Handle one parsed request and send its answer; False closes the connection."""
        prefix, client_id, request = item.prefix, item.client_id, item.request
        assert self.security is not None
        if not self.security.gate(conn, prefix.api_key):  # here, not when read ahead: SASL may finish between
            log.warning("%s (client %s): api key %d before SASL authentication, closing", peer,
                        framing.printable(client_id), prefix.api_key)
            return False
        if item.refusal is not None:
            from kio.schema.errors import ErrorCode

            answer = error_response(prefix.api_key, prefix.api_version, ErrorCode.invalid_request, item.refusal)
            writer.write(framing.encode_response(prefix.correlation_id, answer))
            await writer.drain()
            return True
        if request is None:
            writer.write(framing.encode_response(prefix.correlation_id, dispatch.unsupported_api_versions()))
            await writer.drain()
            return True
        assert self.broker is not None and self.executor is not None
        ctx = RequestContext(store=self.store, broker=self.brokers.get(conn.listener, self.broker),
                             client_id=client_id, client_host=conn.peer_host, api_version=prefix.api_version,
                             executor=self.executor, log=log, coordinator=self.coordinator,
                             correlation_id=prefix.correlation_id, server=self, principal=conn.principal,
                             security=conn)
        handler = self.handlers[prefix.api_key]
        started = time.monotonic()
        try:
            response = await handler.fn(ctx, request)
        except (TypeError, ValueError, AttributeError) as e:  # a well-framed request holding nonsense (null arrays)
            log.warning("%s (client %s): %s v%d cannot be handled (%s: %s), closing", peer,
                        framing.printable(client_id), type(request).__name__, prefix.api_version, type(e).__name__, e)
            return False
        throttle_ms = self.security.throttle_ms(conn, client_id, prefix.api_key, item.frame_bytes, response,
                                                (time.monotonic() - started) * 1000)
        if response.__class__ is Acks0Failed:
            return _acks0_failed(response, peer, client_id, prefix.correlation_id)
        if response is None:
            return await self._mute(throttle_ms)
        if throttle_ms > 0:
            response = with_throttle(response, throttle_ms)
        if item.raw_sasl:  # answered as it came: the server's token, size-prefixed; a failure closes
            if response.error_code != 0:
                return False
            writer.write(framing.SIZE.pack(len(response.auth_bytes)) + response.auth_bytes)
            await writer.drain()
            return True
        if isinstance(response, framing.RawBody):
            await response.send(writer, prefix.correlation_id)
        else:
            # a big answer is written in a thread, like its parse (a small request may ask for one)
            if item.entries > ENCODE_INLINE_ENTRIES or framing.entries_past(response, ENCODE_INLINE_ENTRIES):
                data = await asyncio.get_running_loop().run_in_executor(self.parse_executor, framing.encode_response,
                                                                        prefix.correlation_id, response)
            else:
                data = framing.encode_response(prefix.correlation_id, response)
            await framing.write_frame(writer, data)
        if conn.close_after_response:  # linger so the client reads the refusal before it sees the close
            await asyncio.sleep(CLOSE_LINGER_MS / 1000)
            return False
        return await self._mute(throttle_ms) if throttle_ms > 0 else True

    def _groupable(self, item: _Parsed, conn: ConnectionSecurity) -> bool:
        """Whether queued Produce requests may join `item` (not under quotas: each request's
        throttle mutes the connection before the next is read, as Kafka's channel muting does)."""
        assert self.security is not None
        return (item.prefix.api_key == PRODUCE and item.request is not None and item.refusal is None
                and not item.raw_sasl and conn.authenticated and not self.security.quotas.quotas())

    async def _produce_group(self, first: _Parsed, proto: FrameProtocol, peer: str) -> tuple[list[_Parsed], Any]:
        """`first` and the Produce requests of its version already queued behind it (librdkafka
        sends one partition per request: a wide topic's requests come in a burst), up to
        PRODUCE_GROUP_MAX and while they hold less than PRODUCE_GROUP_BYTES; and the request read
        after them that cannot join (None: the connection must close after answering these,
        _NO_ITEM: none)."""
        group = [first]
        held = first.frame_bytes
        while len(group) < PRODUCE_GROUP_MAX and held < PRODUCE_GROUP_BYTES:
            frame = proto.queued_frame(PRODUCE, first.prefix.api_version)
            if frame is None:
                return group, _NO_ITEM
            held += len(frame)
            parsed = await self._parsed(frame, peer)
            if parsed is None or parsed.request is None or parsed.refusal is not None:
                return group, parsed
            group.append(parsed)
        return group, _NO_ITEM

    async def _answer_group(self, items: list[_Parsed], writer: asyncio.StreamWriter, peer: str,
                            conn: ConnectionSecurity) -> bool:
        """Produce requests handled as one (klog.server.produce.produce_group: one multi-partition
        append) and answered one by one, in order, as _answer answers each; False closes."""
        from klog.server.produce import produce_group

        if len(items) == 1:
            return await self._answer(items[0], writer, peer, conn)
        assert self.security is not None and self.broker is not None and self.executor is not None
        if not all(self.security.gate(conn, item.prefix.api_key) for item in items):
            log.warning("%s (client %s): api key %d before SASL authentication, closing", peer,
                        framing.printable(items[0].client_id), PRODUCE)
            return False
        def context_of(i: int) -> RequestContext:  # (made where produce_group needs it, not one a request)
            item = items[i]
            return RequestContext(store=self.store, broker=self.brokers.get(conn.listener, self.broker),
                                  client_id=item.client_id, client_host=peer.rpartition(":")[0],
                                  api_version=item.prefix.api_version, executor=self.executor, log=log,
                                  coordinator=self.coordinator, correlation_id=item.prefix.correlation_id, server=self,
                                  principal=conn.principal, security=conn)

        started = time.monotonic()
        try:
            answers = await produce_group(context_of, [item.request for item in items])
        except (TypeError, ValueError, AttributeError) as e:  # a well-framed request holding nonsense
            log.warning("%s (client %s): Produce v%d cannot be handled (%s: %s), closing", peer,
                        framing.printable(items[0].client_id), items[0].prefix.api_version, type(e).__name__, e)
            return False
        elapsed_ms = (time.monotonic() - started) * 1000 / len(items)
        throttle_ms = 0
        for item, answer in zip(items, answers, strict=True):
            throttle = self.security.throttle_ms(conn, item.client_id, PRODUCE, item.frame_bytes, answer, elapsed_ms)
            throttle_ms = max(throttle_ms, throttle)
            if answer is None:  # acks=0
                continue
            if answer.__class__ is Acks0Failed:  # (the requests before it were answered; none after it was handled)
                return _acks0_failed(answer, peer, item.client_id, item.prefix.correlation_id)
            answer = with_throttle(answer, throttle)
            if isinstance(answer, framing.RawBody):
                await answer.send(writer, item.prefix.correlation_id)
            else:
                writer.write(framing.encode_response(item.prefix.correlation_id, answer))
                await writer.drain()
        if conn.close_after_response:
            await asyncio.sleep(CLOSE_LINGER_MS / 1000)
            return False
        return await self._mute(throttle_ms)

    async def _mute(self, throttle_ms: int) -> bool:
        """A throttled connection reads nothing more until its throttle time is over (Kafka mutes
        the channel; clients since KIP-219 also wait on their side)."""
        if throttle_ms > 0:
            await asyncio.sleep(throttle_ms / 1000)
        return True


def _read_as_kafka(repaired: bytes | None, peer: str, what: str, prefix: framing.RequestPrefix) -> bytes:
    """A frame whose strings were not all UTF-8, with them decoded as Kafka's Java readers decode
    them (malformed sequences replaced by U+FFFD): the request is then answered as Kafka answers it
    (a topic name with U+FFFD is one Kafka refuses by name). One line; the FrameError that closes
    the connection when it cannot be repaired."""
    if repaired is None:
        raise framing.FrameError(f"{what} is not UTF-8 and cannot be read")
    log.info("%s (client %s): %s v%d #%d: %s is not UTF-8: read as Kafka reads it (malformed bytes as U+FFFD)",
             peer, framing.client_id_of(repaired), api_name(prefix.api_key), prefix.api_version,
             prefix.correlation_id, what)
    return repaired


def _acks0_failed(failed: Acks0Failed, peer: str, client_id: str | None, correlation_id: int) -> bool:
    """A Produce with acks=0 that failed closes its connection, as Kafka's does: the client, which
    expects no answer, learns from the close and refreshes its metadata. One line; False: close."""
    shown = ", ".join(f"{framing.printable(t)}-{p} {e}" for t, p, e in failed.failures[:ACKS0_FAILURES_LOGGED])
    more = len(failed.failures) - ACKS0_FAILURES_LOGGED
    log.info("%s (client %s): closing the connection after a failed Produce with acks=0 (correlation id %d): %s%s",
             peer, framing.printable(client_id), correlation_id, shown, f" and {more} more" if more > 0 else "")
    return False


_NO_ITEM: Any = object()  # (_produce_group: no request was read past the group)
_IN_THREAD: Any = object()  # (_parse: a request of many entries, parsed in the parse threads instead)


@dataclass(slots=True)  # (not frozen: a frozen dataclass's __init__ costs ~3x, one made per request)
class _Parsed:
    prefix: framing.RequestPrefix
    client_id: str | None
    request: Any  # None: a too-new ApiVersions request
    frame_bytes: int = 0  # the request's size (producer byte-rate quotas)
    refusal: str | None = None  # a request refused unparsed (too many entries): INVALID_REQUEST, this message
    entries: int = 0  # array entries counted in it (0: not counted, a small frame)
    raw_sasl: bool = False  # a SASL token after SaslHandshake v0, handled as a SaslAuthenticate v0


def raw_sasl_token(frame: bytes) -> _Parsed:
    """A raw SASL token (pre-KIP-152 framing, after SaslHandshake v0) as the SaslAuthenticate v0
    request it stands for, so one handler authenticates both."""
    from kio.index import load_payload_module
    from kio.static.constants import EntityType

    from klog.protocol.apis import SASL_AUTHENTICATE

    request = load_payload_module(SASL_AUTHENTICATE, 0, EntityType.request).SaslAuthenticateRequest(auth_bytes=frame)
    return _Parsed(framing.RequestPrefix(SASL_AUTHENTICATE, 0, -1), None, request, len(frame), raw_sasl=True)



def _produce_acks(frame: bytes, body_at: int, schema: type) -> int | None:
    """A Produce request's acks, read without parsing it: after the transactional id (a string)."""
    import struct

    try:
        if schema.__flexible__:
            n, pos = 0, body_at
            shift = 0
            while True:  # unsigned varint: length + 1
                b = frame[pos]
                pos += 1
                n |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            pos += max(n - 1, 0)
        else:
            (n,) = struct.unpack_from(">h", frame, body_at)
            pos = body_at + 2 + max(n, 0)
        return struct.unpack_from(">h", frame, pos)[0]
    except (IndexError, struct.error):
        return None


def serve(data_dir: str | None = None, **kwargs: Any) -> None:
    """Serve the store at `data_dir` in the foreground until SIGTERM/SIGINT (see Server)."""
    Server(data_dir, **kwargs).run()
