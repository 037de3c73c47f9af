"""`klog spark export|sql|run|stream`: Spark jobs over the store (pyspark is imported only when one runs)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer

from klog.cli.app import DataDirOpt
from klog.cli.env import current_env

MasterOpt = Annotated[str, typer.Option("--master", help="Spark master URL: local[*] (all cores here), "
                                        "local[N], spark://host:7077, yarn, k8s://...")]
ConfOpt = Annotated[list[str] | None, typer.Option("--conf", help="A Spark setting KEY=VALUE (repeatable), "
                                                   "e.g. spark.driver.memory=4g.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Show Spark's INFO logs and stack traces.")]
TABLE_ROWS_MAX = 1000  # a terminal shows at most this many rows; a pipe gets them all


def _settings(master: str, conf: list[str] | None, verbose: bool, data_dir: str | None, progress: bool = False):
    from klog.cli.app import current_cluster
    from klog.spark.launch import check_master
    from klog.spark.options import resolve_data_dir, use_cluster
    from klog.spark.session import SessionSettings, master_of, parse_conf

    target = current_cluster()  # --bootstrap-server / --cluster: sources and sinks read and write there
    use_cluster({"bootstrap.servers": target.bootstrap, **target.properties} if target else None)
    settings = SessionSettings(master=master, conf=parse_conf(conf), verbose=verbose,
                               data_dir=resolve_data_dir(data_dir), progress=progress,
                               notify=lambda line: print(line, file=sys.stderr))
    check_master(master_of(settings))
    return settings


@contextmanager
def _session(settings) -> Iterator:  # noqa: ANN001 - SessionSettings
    """spark_session() whose Spark errors become one-line klog errors, converted while the JVM is still up;
    after Ctrl-C or SIGTERM, the stop (stop_wins)."""
    from klog.spark.failures import spark_errors, stop_wins
    from klog.spark.session import spark_session

    with stop_wins() as stops, spark_errors(), spark_session(settings) as spark, spark_errors():
        stops.watch()  # PySpark's SIGINT handler, installed as the session started
        try:
            yield spark
        finally:
            _forget_cluster(spark, settings)


def _forget_cluster(spark, settings) -> None:  # noqa: ANN001 - SparkSession, SessionSettings
    """A session that outlives the command (tests, `klog spark run` inside PySpark) goes back to the
    store: the source registered for a --bootstrap-server command would keep the cluster as default."""
    from klog.spark.options import cluster_options, use_cluster

    if cluster_options():
        use_cluster(None)
        from klog.spark.session import register

        with contextlib.suppress(Exception):  # a session stopped meanwhile has nothing to re-register
            register(spark, settings.data_dir)


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def register(app: typer.Typer) -> None:
    spark_app = typer.Typer(
        name="spark", no_args_is_help=True,
        help="Spark jobs over topics: export to files, SQL, PySpark scripts, topic-to-topic streams "
             "(needs the spark extra and Java 17+).")
    app.add_typer(spark_app)

    @spark_app.command(help=(
        "Export a topic (or a range of it) to Parquet, JSON, CSV or ORC files.\n\nWith --value-format text or "
        "binary the columns are Kafka's (topic, partition, offset, timestamp, key, value, headers); with "
        "json, the fields of the JSON values plus _key, _partition, _offset and _timestamp. --partition-by "
        "takes a column, or date / hour of the record timestamp (UTC)."))
    def export(
        topic: Annotated[str, typer.Argument(help="Topic to export.")],
        out: Annotated[str, typer.Option("--out", help="Output directory (Spark writes part files into it).")],
        to: Annotated[str, typer.Option("--to", help="parquet | json | csv | orc.")] = "parquet",
        offset: Annotated[str | None, typer.Option("--offset", "-o",
                                                   help="Start: beginning | end | N | -N (N back from the end).")]
        = None,
        since: Annotated[str | None, typer.Option("--since", help="Start at a time: ISO, epoch ms, 15m ago.")] = None,
        until: Annotated[str | None, typer.Option("--until", help="Stop at the first record at or after this time.")]
        = None,
        partition: Annotated[list[int] | None, typer.Option("--partition", "-p", help="Only this partition.")] = None,
        value_format: Annotated[str, typer.Option("--value-format", help="text | json | binary. text decodes "
                                                  "keys, values and header values as UTF-8, invalid bytes "
                                                  "replaced by U+FFFD (a Parquet STRING holds valid UTF-8 only: "
                                                  "use binary to keep the bytes).")] = "text",
        schema: Annotated[str | None, typer.Option("--schema", help="Schema of JSON values as Spark DDL, e.g. "
                                                   "'id INT, name STRING' (default: inferred from a sample).")]
        = None,
        partition_by: Annotated[list[str] | None, typer.Option("--partition-by", help="Folder per value of this "
                                                               "column, or date / hour (repeatable).")] = None,
        overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace --out if it exists.")] = False,
        master: MasterOpt = "local[*]",
        conf: ConfOpt = None,
        verbose: VerboseOpt = False,
        data_dir: DataDirOpt = None,
    ) -> None:
        from klog.spark.export import ExportRequest, RangeRequest, check_request
        from klog.spark.export import export as run_export

        settings = _settings(master, conf, verbose, data_dir, progress=current_env().stderr_tty)
        req = ExportRequest(RangeRequest(topic, offset, since, until, partition), to.lower(), out, value_format,
                            schema, partition_by or [], overwrite)
        check_request(settings.data_dir, req)
        with _session(settings) as spark:
            summary = run_export(spark, settings.data_dir, req)
        print(f"exported {summary.records:,} records to {summary.out}: {summary.files} files, "
              f"{_human_bytes(summary.bytes)}", file=sys.stderr)

    @spark_app.command(help=(
        "Run Spark SQL over topics: every topic the query names is a view.\n\nA topic whose values are JSON "
        "objects has their fields as columns plus _key, _partition, _offset and _timestamp; other topics have "
        "Kafka's columns with key and value as text. Quote names with - or . in backticks. Results print as a "
        "table on a terminal and as JSON lines on a pipe, or go to --out / --to-topic."))
    def sql(
        query: Annotated[str, typer.Argument(help="The SQL query, e.g. \"SELECT status, count(*) FROM access "
                                             "GROUP BY status\".")],
        out: Annotated[str | None, typer.Option("--out", help="Write the result as files into this directory.")]
        = None,
        to: Annotated[str, typer.Option("--to", help="File format for --out: parquet | json | csv | orc.")]
        = "parquet",
        to_topic: Annotated[str | None, typer.Option("--to-topic", help="Produce the result to this topic (rows "
                                                     "with a value column as they are, others as JSON).")] = None,
        value_format: Annotated[str, typer.Option("--value-format", help="auto | json | text | binary: how "
                                                  "topic values become columns.")] = "auto",
        overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace --out if it exists.")] = False,
        master: MasterOpt = "local[*]",
        conf: ConfOpt = None,
        verbose: VerboseOpt = False,
        data_dir: DataDirOpt = None,
    ) -> None:
        from klog.errors import UsageError
        from klog.spark import sql as spark_sql
        from klog.spark.export import check_format, check_output

        if out is not None and to_topic is not None:
            raise UsageError("use --out or --to-topic, not both")
        settings = _settings(master, conf, verbose, data_dir)
        spark_sql.check_value_format(value_format)
        check_format(to.lower())
        if out is not None:
            check_output(to.lower(), out, overwrite)
        if to_topic is not None:
            from klog.spark.options import open_store
            from klog.spark.stream import check_target_topic

            with open_store(settings.data_dir) as store:
                check_target_topic(store, to_topic)
        with _session(settings) as spark:
            df = spark_sql.query(spark, settings.data_dir, query, value_format)
            if to_topic is not None:
                n = spark_sql.write_topic(df, settings.data_dir, to_topic)
                print(f"produced {n:,} records to {to_topic}", file=sys.stderr)
            elif out is not None:
                result = spark_sql.write_files(df, out, to.lower(), overwrite)
                print(f"wrote {result.records:,} rows to {out}: {result.files} files, "
                      f"{_human_bytes(result.bytes)}", file=sys.stderr)
            else:
                _print_rows(*spark_sql.rows(df))

    @spark_app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
                       help=(
        "Run a PySpark script with a session set up for the store (what spark-submit does).\n\nThe script's "
        "SparkSession.builder.getOrCreate() returns klog's session (--master, --conf, quiet logs) with the "
        "klog source registered and KLOG_DATA_DIR set, so spark.read.format(\"klog\").load(\"TOPIC\") works; it "
        "also finds `spark` as a global. Arguments after the script are its sys.argv[1:]."))
    def run(
        ctx: typer.Context,
        script: Annotated[str, typer.Argument(help="The PySpark script (see samples/spark_job.py).")],
        master: MasterOpt = "local[*]",
        conf: ConfOpt = None,
        verbose: VerboseOpt = False,
        data_dir: DataDirOpt = None,
    ) -> None:
        from klog.spark.run import check_script, run_script

        settings = _settings(master, conf, verbose, data_dir)
        check_script(script)
        with _session(settings) as spark:
            code = run_script(spark, script, list(ctx.args))
        if code:
            raise typer.Exit(code)

    @spark_app.command(help=(
        "Stream records from one topic to another through Spark SQL or a script.\n\nThe source is a streaming "
        "view named after the topic (and `source`) with key and value as text: --sql \"SELECT upper(value) AS "
        "value FROM source\". A --script file defines transform(df) -> df. Progress is kept in the checkpoint "
        "(default: <data dir>/spark/checkpoints/FROM--TO), so a restart goes on where the job stopped; output "
        "is exactly once per batch except when the job dies while writing one (then that batch may be written "
        "twice); with --transactional-id each batch is one transaction, exactly once for read_committed "
        "readers even then. An aggregation (GROUP BY) needs --output-mode update or complete, or a "
        "--watermark in append mode. --available-now processes what is there and stops."))
    def stream(
        source: Annotated[str, typer.Option("--from", help="Source topic.")],
        target: Annotated[str, typer.Option("--to", help="Target topic (created if missing and allowed).")],
        sql_text: Annotated[str | None, typer.Option("--sql", help="SQL over the view `source`.")] = None,
        script: Annotated[str | None, typer.Option("--script", help="Python file defining transform(df) -> df.")]
        = None,
        checkpoint: Annotated[str | None, typer.Option("--checkpoint", help="Checkpoint directory (keep it to "
                                                       "resume; on a shared filesystem for a cluster).")] = None,
        available_now: Annotated[bool, typer.Option("--available-now", help="Process the records there now, "
                                                    "then stop.")] = False,
        trigger_seconds: Annotated[float, typer.Option("--trigger-seconds", help="Micro-batch interval when "
                                                       "running on.")] = 1.0,
        starting_offsets: Annotated[str, typer.Option("--starting-offsets", help="Where a new job starts: earliest "
                                                      "| latest (a restart uses its checkpoint).")] = "earliest",
        max_records: Annotated[int | None, typer.Option("--max-records-per-batch",
                                                        help="Cap each micro-batch (maxOffsetsPerTrigger).")] = None,
        output_mode: Annotated[str, typer.Option("--output-mode", help="append (new rows) | update (rows an "
                                                 "aggregation changed) | complete (the whole result each "
                                                 "batch): Spark's output modes; each row is one record.")]
        = "append",
        watermark: Annotated[str | None, typer.Option("--watermark", help="COLUMN,DELAY, e.g. 'timestamp,10 "
                                                      "minutes': how late a record may be (Spark's "
                                                      "withWatermark); lets append mode emit closed windows.")]
        = None,
        transactional_id: Annotated[str | None, typer.Option("--transactional-id", help="Write each "
                                                             "micro-batch as one transaction with this id "
                                                             "(exactly once for read_committed readers).")]
        = None,
        master: MasterOpt = "local[*]",
        conf: ConfOpt = None,
        verbose: VerboseOpt = False,
        data_dir: DataDirOpt = None,
    ) -> None:
        from klog.spark import stream as spark_stream

        settings = _settings(master, conf, verbose, data_dir)
        req = spark_stream.StreamRequest(source, target, sql_text, script, checkpoint, available_now,
                                         trigger_seconds, starting_offsets, max_records, output_mode.lower(),
                                         watermark, transactional_id)
        spark_stream.check_request(settings.data_dir, req)
        checkpoint_dir = checkpoint or spark_stream.default_checkpoint(settings.data_dir, source, target)
        with _session(settings) as spark:
            query = spark_stream.start(spark, settings.data_dir, req)
            def ready() -> None:
                if not available_now:
                    print(f"streaming {source} -> {target} (checkpoint {checkpoint_dir}); Ctrl-C stops",
                          file=sys.stderr, flush=True)

            stopped_by = spark_stream.wait(query, ready=ready)
            summary = spark_stream.summarize(query, checkpoint_dir)
        print(f"streamed {summary.records:,} records in {summary.batches} batches from {source} to {target} "
              f"(checkpoint {summary.checkpoint})", file=sys.stderr)
        if stopped_by:
            import signal

            if stopped_by == signal.SIGTERM:
                signal.raise_signal(signal.SIGTERM)  # klog's handler (cli/session.py): exit 143, "terminated"
            raise KeyboardInterrupt


def _print_rows(columns: list[str], rows) -> None:  # noqa: ANN001 - iterator of dicts
    if current_env().stdout_tty:
        from klog.cli.tables import print_table

        shown = []
        for row in rows:
            if len(shown) == TABLE_ROWS_MAX:
                print(f"(showing the first {TABLE_ROWS_MAX} rows; pipe the output for all of them)", file=sys.stderr)
                break
            shown.append([json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list)) else
                          ("" if v is None else v) for v in (row[c] for c in columns)])
        print_table(columns, shown)
        return
    out = sys.stdout
    for row in rows:
        out.write(json.dumps(row, ensure_ascii=False) + "\n")
    out.flush()
