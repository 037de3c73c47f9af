"""The `klog` data source for PySpark: batch and stream readers, batch and stream writers.

    spark.read.format("klog").option("subscribe", "orders").load()
    df.write.format("klog").option("topic", "out").mode("append").save()

Planning (which partitions, which offsets) happens on the driver; each input partition is one
offset range that an executor reads straight from the segment files (klog/spark/arrow.py). Every
object here is pickled to Spark's Python workers, so they hold plain data only (no open stores).
"""

from __future__ import annotations

import contextlib
import math
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

from klog.errors import UsageError
from klog.spark import ranges as plan
from klog.spark.arrow import (
    SCHEMA_DDL,
    SCHEMA_DDL_NO_HEADERS,
    arrow_schema,
    open_options_store,
    read_range,
    read_range_remote,
)
from klog.spark.options import ReadOptions, WriteOptions, lower, parse_read_options, parse_write_options
from klog.spark.sink import (
    StreamCommitter,
    check_sink_schema,
    discard,
    send_task,
    send_transaction,
    stage_batches,
    staged_batches,
    staging_root,
    sweep,
)

if TYPE_CHECKING:
    from klog.client.interface import AnyStore


class KlogDataSource(DataSource):
    """Topics of a klog store as a Spark table with the schema of Spark's Kafka source."""

    default_data_dir: str | None = None  # set on the subclass bound_source() makes
    default_kafka: tuple[tuple[str, str], ...] = ()  # kafka.* options of `klog spark --bootstrap-server`

    def _options(self) -> dict[str, str]:
        opts = lower(self.options)
        if "datadir" not in opts and self.default_data_dir:
            opts["datadir"] = self.default_data_dir
        if not any(k.startswith("kafka.") for k in opts):
            opts.update(self.default_kafka)
        return opts

    @classmethod
    def name(cls) -> str:
        return "klog"

    def schema(self) -> str:
        opts = self._options()
        return SCHEMA_DDL if opts.get("includeheaders", "true").strip().lower() != "false" else SCHEMA_DDL_NO_HEADERS

    def reader(self, schema) -> DataSourceReader:  # noqa: ANN001 - StructType
        return KlogBatchReader(parse_read_options(self._options()))

    def streamReader(self, schema) -> DataSourceStreamReader:  # noqa: ANN001
        return KlogStreamReader(parse_read_options(self._options(), streaming=True))

    def writer(self, schema, overwrite: bool) -> DataSourceArrowWriter:  # noqa: ANN001
        _refuse_overwrite(overwrite)
        opts = parse_write_options(self._options())
        check_sink_schema(schema, opts)
        return KlogBatchWriter(opts)

    def streamWriter(self, schema, overwrite: bool) -> DataSourceStreamArrowWriter:  # noqa: ANN001
        # (every output mode appends, as Spark's Kafka sink does for append, update and complete)
        opts = parse_write_options(self._options())
        check_sink_schema(schema, opts)
        return KlogStreamWriter(opts)


def _refuse_overwrite(overwrite: bool) -> None:
    if overwrite:  # Spark's Kafka sink: "Save mode Overwrite not allowed for Kafka"
        raise UsageError("save mode overwrite is not allowed for klog (as for Kafka): a topic is appended to; "
                         "use mode append")


def bound_source(data_dir: str) -> type[KlogDataSource]:
    """The source with `dataDir` defaulting to data_dir. Python workers do not share the driver's
    environment once Spark runs, so the default travels inside the class: Spark pickles a class made
    here by value, class attribute included."""
    from klog.spark.options import cluster_options

    return type("BoundKlogDataSource", (KlogDataSource,), {"default_data_dir": data_dir,
                                                           "default_kafka": tuple(cluster_options().items())})


class RangePartition(InputPartition):
    def __init__(self, r: plan.OffsetRange) -> None:
        super().__init__((r.topic, r.partition, r.start, r.end))
        self.range = r


def _open_store(opts: ReadOptions | WriteOptions) -> AnyStore:
    """The store the options name: a cluster with kafka.bootstrap.servers, else the dataDir store."""
    return open_options_store(opts)


def _read(opts: ReadOptions, partition: RangePartition) -> Iterator:
    r = partition.range
    if dict(opts.kafka).get("bootstrap.servers"):
        yield from read_range_remote(opts.kafka, r.topic, r.partition, r.start, r.end,
                                     arrow_schema(opts.include_headers), opts.fail_on_data_loss)
        return
    yield from read_range(opts.data_dir, r.topic, r.partition, r.start, r.end, opts.fail_on_data_loss,
                          arrow_schema(opts.include_headers), opts.isolation_level == "read_committed")


class KlogBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        with _open_store(opts) as store:  # plan now: an unknown topic fails at load()
            self.ranges = plan.split(plan.plan(store, opts), opts.min_partitions)

    def partitions(self) -> list[RangePartition]:
        if not self.ranges:  # Spark wants at least one partition; an empty range reads nothing
            return [RangePartition(plan.OffsetRange("", 0, 0, 0))]
        return [RangePartition(r) for r in self.ranges]

    def read(self, partition: RangePartition) -> Iterator:
        if partition.range.size == 0:
            return iter(())
        return _read(self.opts, partition)


class KlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Stream offsets are Spark's Kafka JSON, {topic: {"partition": next offset}}; latest = high watermarks."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.target: dict | None = None  # availableNow: the high watermarks when the query started
        with _open_store(opts) as store:
            plan.checked_partitions(store, opts)  # fail now for an unknown topic or partition

    def initialOffset(self) -> dict:
        with _open_store(self.opts) as opened:
            store = plan.planning_view(opened)
            return plan.stream_offsets({
                tp: plan.position(store, tp, self.opts.starting, self.opts.starting_ms, plan.LATEST,
                                  self.opts.fail_on_data_loss, "startingOffsets",
                                  self.opts.starting_timestamp_strategy, self.opts)
                for tp in plan.topic_partitions(store, self.opts)})

    def _high_watermarks(self) -> dict[plan.TopicPartition, int]:
        with _open_store(self.opts) as opened:
            store = plan.planning_view(opened)
            return {tp: plan.end_offset(store.partition(*tp), self.opts)
                    for tp in plan.topic_partitions(store, self.opts)}

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = plan.stream_offsets(self._high_watermarks())

    def getDefaultReadLimit(self):  # noqa: ANN201 - ReadLimit
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: dict, limit) -> dict:  # noqa: ANN001 - ReadLimit
        latest = self._high_watermarks()
        if self.target is not None:
            target = plan.from_stream_offsets(self.target)
            latest = {tp: min(hw, target[tp]) for tp, hw in latest.items() if tp in target}
        begun = plan.from_stream_offsets(start)
        latest = {tp: max(hw, begun.get(tp, 0)) for tp, hw in latest.items()}
        if isinstance(limit, ReadMaxRows):
            new = self._log_starts(tp for tp in latest if tp not in begun)
            latest = _limit_rows(begun, latest, limit.max_rows, new)
        return plan.stream_offsets(latest)

    def _log_starts(self, tps) -> dict[plan.TopicPartition, int]:  # noqa: ANN001 - iterable of partitions
        """Where partitions that appeared since the last batch start (partitions() reads them from there)."""
        tps = list(tps)
        if not tps:
            return {}
        with _open_store(self.opts) as opened:
            store = plan.planning_view(opened)
            return {tp: store.partition(*tp).log_start_offset() for tp in tps}

    def reportLatestOffset(self) -> dict:
        return plan.stream_offsets(self._high_watermarks())

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        begun = plan.from_stream_offsets(start)
        ranges = []
        with _open_store(self.opts) as opened:
            store = plan.planning_view(opened)
            for tp, stop in plan.from_stream_offsets(end).items():
                # a partition or topic that appeared since the last batch starts at its beginning (as in Spark)
                first = begun[tp] if tp in begun else store.partition(*tp).log_start_offset()
                ranges.append(plan.OffsetRange(tp[0], tp[1], first, stop))
        return [RangePartition(r) for r in plan.split(ranges, self.opts.min_partitions)]

    def read(self, partition: RangePartition) -> Iterator:
        return _read(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Nothing to release: the reader keeps no progress (Spark's checkpoint holds it)."""


def _limit_rows(start: dict[plan.TopicPartition, int], latest: dict[plan.TopicPartition, int],
                rows_max: int, new_start: dict[plan.TopicPartition, int] | None = None,
                ) -> dict[plan.TopicPartition, int]:
    """maxOffsetsPerTrigger as Spark's Kafka source splits it (KafkaMicroBatchStream.rateLimit): each
    partition gets limit * its backlog / the total backlog, rounded down (up when below 1). A partition
    that appeared since the last batch counts its backlog from its log start (`new_start`), as in Spark."""
    new_start = new_start or {}
    out = {tp: start.get(tp, new_start.get(tp, hw)) for tp, hw in latest.items()}
    backlog = {tp: hw - out[tp] for tp, hw in latest.items() if hw > out[tp]}
    total = sum(backlog.values())
    if total <= rows_max:
        return {tp: max(out[tp], hw) for tp, hw in latest.items()}
    for tp, size in backlog.items():
        prorate = rows_max * size / total
        take = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(out[tp] + take, latest[tp])
    return out


@dataclass
class WrittenMessage(WriterCommitMessage):
    records: int


@dataclass
class StagedMessage(WriterCommitMessage):
    path: str | None
    records: int


class KlogBatchWriter(DataSourceArrowWriter):
    """Each task produces its rows with acks=all; keyed rows land where Kafka's partitioner puts them.

    Like Spark's Kafka sink this is at-least-once: a task Spark retries writes its rows again. With
    the transactional.id option, tasks stage their rows and the driver's commit produces them all in
    one transaction: the write is all or nothing for read_committed readers, and retried tasks'
    rows are not repeated. With batchId (a foreachBatch micro-batch), the driver's commit follows
    the stream writer's rules (StreamCommitter): a batch id already committed is not written again.
    """

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.staged = opts.transactional_id is not None or opts.batch_id is not None
        self.staging_dir = os.path.join(staging_root(opts.data_dir), uuid.uuid4().hex)

    def write(self, iterator: Iterator) -> WrittenMessage | StagedMessage:
        if self.staged:
            return StagedMessage(*stage_batches(self.staging_dir, iterator))
        with _open_store(self.opts) as store:
            return WrittenMessage(send_task(store, self.opts, iterator))

    def commit(self, messages: list) -> None:
        if not self.staged:
            return
        paths = _staged_paths(messages)
        try:
            with _open_store(self.opts) as store:
                if self.opts.batch_id is not None:
                    StreamCommitter(self.opts).commit(store, paths, self.opts.batch_id)
                else:
                    send_transaction(store, self.opts, staged_batches(paths))
        finally:
            _discard_staging(paths, self.staging_dir)

    def abort(self, messages: list) -> None:
        _discard_staging(_staged_paths(messages), self.staging_dir)


def _staged_paths(messages: list) -> list[str]:
    return [m.path for m in messages if isinstance(m, StagedMessage) and m.path]


def _discard_staging(paths: list[str], directory: str) -> None:
    discard(paths)
    sweep(directory)  # a failed, killed or speculative attempt's file: this write's directory is its own
    with contextlib.suppress(OSError):
        os.rmdir(directory)


class KlogStreamWriter(DataSourceStreamArrowWriter):
    """Tasks stage their rows as Arrow files; the driver's commit(batch id) produces them (in one
    transaction with the transactional.id option) and records the batch id, so a batch Spark
    replays after a restart is not written twice (klog.spark.sink.StreamCommitter says when)."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.committer = StreamCommitter(opts)
        self.staging_dir = self.committer.staging_dir

    def write(self, iterator: Iterator) -> StagedMessage:
        path, records = stage_batches(self.staging_dir, iterator)
        return StagedMessage(path, records)

    def commit(self, messages: list, batchId: int) -> None:  # noqa: N803 - Spark's name
        with _open_store(self.opts) as store:
            self.committer.commit(store, _staged_paths(messages), batchId)
        sweep(self.staging_dir)

    def abort(self, messages: list, batchId: int) -> None:  # noqa: N803
        discard(_staged_paths(messages))
