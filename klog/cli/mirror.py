"""`klog mirror SRC DEST [TOPIC...]`: copy topics between local stores and Kafka clusters."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Annotated

import typer

from klog.cli.app import DataDirOpt, warn
from klog.cli.env import current_env

MIRROR_HELP = (
    "Copy topics from SRC to DEST, each a local store (a directory) or a Kafka cluster "
    "(kafka://HOST:PORT[,...], HOST:PORT, or @NAME for 'klog clusters add NAME').\n\n"
    "Keys, values, headers, timestamps and partitions are kept; a missing DEST topic is created with the source's "
    "partition count and the configs set on it. Without topics or --pattern every topic is copied (not those "
    "starting with __). --follow keeps copying new records (and, with --pattern, new topics).\n\n"
    "Progress is checkpointed in DEST's topic __klog_mirror_checkpoints: a stopped mirror resumes where it "
    "stopped, with no duplicate after Ctrl-C or SIGTERM; after a kill -9 it copies again at most the records "
    "of the last second (at most 200,000): at-least-once. --name keeps that progress apart for two mirrors "
    "of the same source."
)


def _mirror_id(spec: str, data_dir: str | None) -> str:
    """The source's identity in checkpoints: a store's real path, or the cluster's servers (however
    they were written: kafka://h:p and h:p are one source); a named cluster by its name."""
    from klog.client.remote.target import parse_endpoint

    if spec.startswith("@"):
        return spec
    where = parse_endpoint(spec, data_dir, None)
    return os.path.realpath(where) if isinstance(where, str) else f"kafka://{where.bootstrap}"


def register(app: typer.Typer) -> None:
    @app.command(help=MIRROR_HELP)
    def mirror(
        source: Annotated[str, typer.Argument(help="Where to copy from: a store directory or a cluster.")],
        dest: Annotated[str, typer.Argument(help="Where to copy to: a store directory or a cluster.")],
        topics: Annotated[list[str] | None, typer.Argument(help="Topics to copy (default: all).")] = None,
        pattern: Annotated[str | None, typer.Option("--pattern", help="Also copy topics whose whole name matches "
                                                    "REGEX ('orders.*', not 'orders').")] = None,
        rename: Annotated[str, typer.Option("--rename", help="DEST topic name; {topic} is the source's "
                                            "(e.g. 'src.{topic}').")] = "{topic}",
        follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep copying new records until stopped.")]
        = False,
        name: Annotated[str | None, typer.Option("--name", help="This mirror's name in the checkpoints "
                                                 "(default: the source).")] = None,
        source_property: Annotated[list[str] | None, typer.Option(
            "--source-property", help="Kafka client property name=value for a SRC cluster.")] = None,
        dest_property: Annotated[list[str] | None, typer.Option(
            "--dest-property", help="Kafka client property name=value for a DEST cluster.")] = None,
        exactly_once: Annotated[bool, typer.Option(
            "--exactly-once", help="Copy each record exactly once, also across kills: records and checkpoints are "
            "committed together in transactions (read DEST with read_committed).")] = False,
        isolation_level: Annotated[str | None, typer.Option(
            "--isolation-level", help="How to read SRC: read_committed (the default: records of aborted "
            "transactions are not copied, open ones once they commit) or read_uncommitted (every record "
            "written, as it is).")] = None,
        data_dir: DataDirOpt = None,
    ) -> None:
        from klog.client.mirror import Mirror, renamer
        from klog.client.remote.target import open_endpoint

        renamer(rename)  # a bad template fails before anything opens
        level = _isolation_level(isolation_level, source, data_dir, source_property, exactly_once)
        _refuse_a_copy_onto_itself(source, dest, data_dir, source_property, dest_property, rename)
        with contextlib.ExitStack() as stack:
            src = stack.enter_context(open_endpoint(source, data_dir, source_property, create=False, on_warning=warn))
            dst = stack.enter_context(open_endpoint(dest, data_dir, dest_property, create=True, on_warning=warn))
            progress = _Progress(current_env().stderr_tty)
            stack.enter_context(progress)
            job = Mirror(src, dst, topics or [], mirror_id=name or _mirror_id(source, data_dir), pattern=pattern,
                         rename=rename, follow=follow, exactly_once=exactly_once, isolation_level=level,
                         on_progress=progress.update, on_warning=warn)
            interrupted = False
            try:  # SIGTERM arrives as KeyboardInterrupt too (session.Signals), and exits 143
                stats = job.run()
            except KeyboardInterrupt:
                interrupted, stats = True, job.stats
        rate = stats.records / stats.seconds if stats.seconds > 0 else 0.0
        print(f"mirrored {stats.records} records of {len(stats.topics)} topics ({stats.partitions} partitions) "
              f"from {source} to {dest} in {stats.seconds:.1f} s ({rate:,.0f} records/s)"
              + (f"; resumed {stats.resumed} partitions from checkpoints" if stats.resumed else ""),
              file=sys.stderr)
        if interrupted:
            raise KeyboardInterrupt


def _isolation_level(flag: str | None, source: str, data_dir: str | None, source_property: list[str] | None,
                     exactly_once: bool) -> str:
    """--isolation-level, or a SRC cluster's isolation.level property (--source-property, or one saved
    with a named cluster: the cluster's reader uses it whatever the mirror asks), read_committed when
    none says; they must agree; checked before anything opens."""
    from klog.client.mirror import checked_isolation
    from klog.errors import UsageError

    said = [value.strip() for name, _, value in (p.partition("=") for p in source_property or ())
            if name.strip() == "isolation.level"]
    where = f"--source-property isolation.level={said[-1]}" if said else None
    if not said and source.startswith("@"):
        from klog.client.remote.target import parse_endpoint

        saved = parse_endpoint(source, data_dir, None).properties.get("isolation.level")
        if saved is not None:
            said, where = [saved.strip()], f"cluster {source}'s property isolation.level={saved.strip()}"
    if flag is not None and said and said[-1] != flag:
        raise UsageError(f"--isolation-level {flag} contradicts {where}")
    if exactly_once and said and said[-1] != "read_committed":
        raise UsageError(f"--exactly-once copies committed records only: it reads the source at read_committed, "
                         f"not as {where} says")
    return checked_isolation(flag or (said[-1] if said else "read_committed"), exactly_once)


def _refuse_a_copy_onto_itself(source: str, dest: str, data_dir: str | None, source_property: list[str] | None,
                               dest_property: list[str] | None, rename: str) -> None:
    """One local store as SRC and DEST under the same names appended every topic to itself (its records
    twice; with -f without end), as replay refuses to."""
    import os

    from klog.client.remote.target import parse_endpoint
    from klog.errors import UsageError

    src, dst = parse_endpoint(source, data_dir, source_property), parse_endpoint(dest, data_dir, dest_property)
    same = isinstance(src, str) and isinstance(dst, str) and os.path.realpath(src) == os.path.realpath(dst)
    if same and rename == "{topic}":
        raise UsageError(f"refusing to mirror {source} into itself (every topic onto itself); give --rename "
                         "(e.g. 'copy.{topic}') or another DEST")


class _Progress:
    """A rich progress bar on a terminal; nothing in a pipe (the summary line says it all)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._bar = None
        self._task = None

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("mirror"), BarColumn(), MofNCompleteColumn(), TextColumn("records"),
                                 TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            self._bar.start()
        return self

    def update(self, stats) -> None:  # noqa: ANN001 - MirrorStats
        if self._bar is None:
            return
        if self._task is None:
            self._task = self._bar.add_task("mirror", total=stats.total)
        self._bar.update(self._task, completed=stats.records, total=stats.total)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
