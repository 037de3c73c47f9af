"""`klog replay SRC [--to DEST]`: re-publish a range of a topic, as fast as possible or at its pace."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from klog.cli.app import DataDirOpt, open_store
from klog.cli.env import Env, current_env
from klog.cli.ranges import CountOpt, OffsetOpt, PartitionOpt, SinceOpt, TailOpt, UntilOpt
from klog.errors import UsageError

if TYPE_CHECKING:
    from klog.client.interface import AnyStore
    from klog.client.records import Record


def parse_speed(text: str) -> float | None:
    """'max' (as fast as possible) or a positive factor: 1 is the original pace, 10 ten times faster."""
    if text.strip().lower() == "max":
        return None
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"invalid --speed '{text}': use max or a positive number such as 1 or 10") from None
    if not value > 0:
        raise UsageError(f"invalid --speed '{text}': use max or a positive number such as 1 or 10")
    return value


def register(app: typer.Typer) -> None:
    """Add the `replay` command to the root app."""

    @app.command()
    def replay(
        source: Annotated[str, typer.Argument(help="Topic to replay.")],
        to: Annotated[str | None, typer.Option("--to", help="Topic to write into (default: stdout). "
                                               "Created with SOURCE's partition count if missing.")] = None,
        offset: OffsetOpt = None,
        since: SinceOpt = None,
        until: UntilOpt = None,
        tail: TailOpt = None,
        count: CountOpt = None,
        partition: PartitionOpt = None,
        keep_timestamps: Annotated[bool, typer.Option("--keep-timestamps",
                                                      help="Keep the original timestamps (default: now).")] = False,
        speed: Annotated[str, typer.Option("--speed", help="max, or a factor of the original pace: 1, 10, 0.5.")]
        = "max",
        rate: Annotated[float | None, typer.Option("--rate", help="At most N records per second.")] = None,
        group: Annotated[str | None, typer.Option("--group", "-G",
                                                  help="Record progress as G: a rerun resumes, no duplicates. The "
                                                  "--to topic must be in a local store (a cluster cannot show "
                                                  "which records of a killed write landed; use klog mirror "
                                                  "there).")]
        = None,
        as_json: Annotated[bool, typer.Option("--json", help="On stdout: the JSON envelope produce --input json "
                                              "reads.")] = False,
        to_store: Annotated[str | None, typer.Option(
            "--to-store", help="The --to topic's store when it is not SOURCE's: a store directory or a Kafka cluster "
            "(kafka://HOST:PORT[,...], HOST:PORT, or @NAME).")] = None,
        dest_property: Annotated[list[str] | None, typer.Option(
            "--dest-property", help="Kafka client property name=value for a --to-store cluster.")] = None,
        isolation_level: Annotated[str | None, typer.Option(
            "--isolation-level", help="How to read SOURCE: read_committed (the default: records of aborted "
            "transactions are skipped, the replay stops before a transaction still open) or read_uncommitted "
            "(every record written); a cluster's -X isolation.level says the same.")] = None,
        data_dir: DataDirOpt = None,
    ) -> None:
        """Re-publish a range of SOURCE into the topic --to names (or stdout), keys and headers kept,
        keyed records to their key's partition; --speed 1 keeps the original gaps between records
        (merged across partitions by timestamp)."""
        from klog.cli.app import warn
        from klog.client.remote.target import open_endpoint
        from klog.client.replay import Replayer
        from klog.client.timespec import parse_range

        start, until_ms = parse_range(offset, since, until, tail)
        factor = parse_speed(speed)
        if to_store is not None and to is None:
            raise UsageError("--to-store needs --to DEST (the topic to write into)")
        if dest_property and to_store is None:
            raise UsageError("--dest-property needs --to-store (a DEST cluster)")
        with contextlib.ExitStack() as stack:
            store = stack.enter_context(open_store(data_dir, create=False))
            isolation_level = _isolation_level(store, isolation_level)
            store.topic(source)
            dest_store = None
            if to_store is not None and not _same_store(store, to_store, data_dir):
                dest_store = stack.enter_context(open_endpoint(to_store, data_dir, dest_property, on_warning=warn))
            env = current_env()
            emit = None if to is not None else _stdout_writer(env, as_json, factor is not None or rate is not None)
            replayer = Replayer(store, source, to, partitions=partition, start=start,
                                until_ms=until_ms, count=count,
                                keep_timestamps=keep_timestamps, speed=factor, rate=rate, group=group, emit=emit,
                                dest_store=dest_store, isolation_level=isolation_level, on_warning=warn)
            stack.callback(replayer.close)
            if to is not None and env.stderr_tty:
                stats = _run_with_progress(replayer)
            else:
                stats = replayer.run()
            sys.stdout.flush()
        if to is not None:
            skipped = f" ({stats.skipped} already replayed by group {group})" if stats.skipped else ""
            print(f"Replayed {stats.records} records from {source} into {to}{skipped}", file=sys.stderr)


def _isolation_level(store: AnyStore, flag: str | None) -> str:
    """--isolation-level, or a SOURCE cluster's isolation.level property (-X, or saved with a named
    cluster: its reader uses it whatever the replay asks), read_committed when neither says; a flag
    contradicting the property is refused (before DEST is created)."""
    target = getattr(store, "target", None)
    said = target.properties.get("isolation.level") if target is not None else None
    if flag is not None and said is not None and said.strip() != flag:
        raise UsageError(f"--isolation-level {flag} contradicts the cluster's property isolation.level={said.strip()}")
    return flag or (said.strip() if said is not None else "read_committed")


def _same_store(store: AnyStore, spec: str, data_dir: str | None) -> bool:
    """Does --to-store name SRC's own store (then DEST == SRC is refused as a replay into itself)?"""
    import os

    from klog.client.remote.target import parse_endpoint

    where = parse_endpoint(spec, data_dir, None) if not spec.startswith("@") else None
    if getattr(store, "is_local", True):
        return isinstance(where, str) and os.path.realpath(where) == os.path.realpath(str(store.path))
    return where is not None and not isinstance(where, str) and where.bootstrap == store.target.bootstrap


def _stdout_writer(env: Env, as_json: bool, paced: bool) -> Callable[[Record], None]:
    """Each replayed record to stdout as consume would show it (record_output: the view on a terminal,
    --json, raw values), flushed per record when paced (records leave at their replay time)."""
    from klog.cli.output import OutputFormat, record_output, terminal_view
    from klog.client.record_writer import write_all

    output = record_output(env, None, as_json)
    if output.format is OutputFormat.VIEW:
        from klog.cli.view import write_stdout

        view = terminal_view(env, False)
        return lambda r: write_stdout(view.line(r).encode("utf-8", "replace"))
    out, line = sys.stdout.buffer, output.render()

    def write(r: Record) -> None:
        write_all(out, line(r))
        if paced:
            out.flush()
    return write


def _run_with_progress(replayer):  # noqa: ANN001, ANN202 - Replayer -> ReplayStats
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(f"replay {replayer.source}", total=replayer.stats.total or None)
        replayer.on_progress = lambda s: bar.update(task, completed=s.records + s.skipped)
        return replayer.run()
