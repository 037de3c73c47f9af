"""The `klog` command: Typer parsing and rendering only; every command is one library call.

Exit codes: 0 success, 1 runtime failure, 2 usage error, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import os
import sys
from enum import IntEnum
from typing import Annotated

import typer

from klog.errors import KlogError


class ExitStatus(IntEnum):
    OK = 0
    ERROR = 1
    USAGE = 2
    INTERRUPTED = 130


app = typer.Typer(
    name="klog",
    help="Apache Kafka's log model as a local, scriptable toolkit: topics, partitions and "
         "Kafka-format segments in a data directory.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

DataDirOpt = Annotated[str | None, typer.Option(
    "--data-dir", "-d", envvar="KLOG_DATA_DIR", show_envvar=True,
    help="Store directory (default: ~/.local/share/klog, the XDG data directory).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def open_store(data_dir: str | None, create: bool = True):  # noqa: ANN201 - klog.Store
    from klog.client.store import Store

    return Store(data_dir, create=create)


def version_callback(value: bool) -> None:
    if value:
        from klog import __version__

        print(f"klog {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[bool, typer.Option("--version", callback=version_callback, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """klog: Kafka's log, local and scriptable."""


def _register() -> None:
    # imported here so each module stays one screen per command group
    from klog.cli import admin, consume, dirs, groups, produce, replay, spark, topics

    app.add_typer(topics.app, name="topics")
    app.add_typer(dirs.app, name="dirs")
    produce.register(app)
    consume.register(app)
    admin.register(app)
    groups.register(app)
    replay.register(app)
    spark.register(app)


_register()


def run(args: list[str] | None = None) -> int:
    """Run klog with `args` (default sys.argv[1:]); returns the exit code, prints one line per error."""
    import click

    try:
        # without standalone mode Typer returns the exit code of typer.Exit and of Ctrl-C (130)
        rv = app(args=args, standalone_mode=False)
        if isinstance(rv, int) and not isinstance(rv, bool):
            if rv == ExitStatus.INTERRUPTED:
                print("klog: interrupted", file=sys.stderr)
            return rv
    except KlogError as e:
        print(f"klog: error: {e}", file=sys.stderr)
        return e.exit_code
    except (KeyboardInterrupt, click.exceptions.Abort):
        print("klog: interrupted", file=sys.stderr)
        return ExitStatus.INTERRUPTED
    except BrokenPipeError:
        _quiet_broken_pipe()
        return ExitStatus.OK
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except OSError as e:
        print(f"klog: error: {e.strerror or e}" + (f": {e.filename}" if e.filename else ""), file=sys.stderr)
        return ExitStatus.ERROR
    return ExitStatus.OK


def main() -> None:
    """Console entry point: one line on stderr for a KlogError, never a traceback."""
    code = run()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_broken_pipe()
    sys.exit(code)


def _quiet_broken_pipe() -> None:
    """`klog consume t | head -1`: the reader left; exit without Python's shutdown warning."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
