"""The `klog` command: Typer parsing and rendering only; every command is one library call.

Exit codes: 0 success, 1 runtime failure, 2 usage error, 130 interrupted (Ctrl-C), 143 terminated
(SIGTERM). Both signals stop every command the same way: records in hand are finished (a producer
writes the whole lines it read, a group member commits what it printed and leaves its group), then
one line on stderr.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from enum import IntEnum
from typing import Annotated, Any

import typer

from klog.cli import placeholders
from klog.errors import KlogError

placeholders.apply()


class ExitStatus(IntEnum):
    OK = 0
    ERROR = 1
    USAGE = 2
    INTERRUPTED = 130
    TERMINATED = 143


app = typer.Typer(
    name="klog",
    help="Apache Kafka's log model as a local, scriptable toolkit: topics, partitions and "
         "Kafka-format segments in a data directory. The options every command takes (--data-dir, "
         "-b/--bootstrap-server, --cluster, -X) may come before the command or after it.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

def data_dir_help() -> str:
    """--data-dir's help naming the store in force: KLOG_DATA_DIR's, else the XDG default (home as ~)."""
    home = os.path.expanduser("~")

    def short(path: str) -> str:
        return "~" + path[len(home):] if home not in ("", "/") and path.startswith(home + os.sep) else path

    xdg = os.environ.get("XDG_DATA_HOME")
    default = short(os.path.join(xdg, "klog")) if xdg else "~/.local/share/klog"
    env = os.environ.get("KLOG_DATA_DIR")
    if env:
        return f"Store directory (now {short(env)}, from KLOG_DATA_DIR; default: {default}, the XDG data directory)."
    return f"Store directory (default: {default}, the XDG data directory)."


_DATA_DIR_OPTION = typer.Option("--data-dir", "-d", envvar="KLOG_DATA_DIR", show_envvar=True, help=data_dir_help())
DataDirOpt = Annotated[str | None, _DATA_DIR_OPTION]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def one_line(message: str) -> str:
    """A message as exactly one line: control characters (a newline in a topic name, an escape
    sequence in a path) are shown escaped, never acted on by the terminal."""
    if message.isprintable():
        return message
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in message)


_quiet = False  # -q: warnings are not printed (they still count: a data loss still exits 1)
_data_lost = False  # a warning reported committed records lost: the command exits 1 even if it did its work


def warn(message: str) -> None:
    """Warnings of every command (a replica leaving the ISR, a new leader, ...), one line on stderr."""
    global _data_lost
    from klog.broker.replication import DATA_LOSS_PREFIX

    _data_lost = _data_lost or message.startswith(DATA_LOSS_PREFIX)
    if _quiet:
        return
    print(f"klog: warning: {one_line(message)}", file=sys.stderr)


def set_quiet(quiet: bool = True) -> None:
    global _quiet
    _quiet = quiet


def open_store(data_dir: str | None, create: bool = True, read_only: bool = False):  # noqa: ANN201
    """The store, its warnings on stderr (producers, replays and moves made from it use them too);
    a Kafka cluster behind the same interface when the command was given one (see cluster_options).
    `read_only`: a command that only reads changes nothing and works on a read-only store."""
    if _cluster_target is not None:
        from klog.client.remote.store import RemoteStore

        return RemoteStore(_cluster_target, on_warning=warn)
    from klog.client.store import Store

    return Store(data_dir, create=create, on_warning=warn, read_only=read_only)


# -- the cluster backend: one option set, added to the commands that work against a cluster ----
CLUSTER_COMMANDS = {("produce",), ("consume",), ("offsets",),
                    ("topics", "list"), ("topics", "describe"), ("topics", "create"), ("topics", "alter"),
                    ("topics", "delete"), ("groups", "list"), ("groups", "describe"), ("groups", "reset-offsets"),
                    ("groups", "delete"), ("groups", "delete-offsets"), ("replay",), ("spark", "export"),
                    ("spark", "sql"), ("spark", "stream"), ("spark", "run"),
                    ("connect", "run"), ("connect", "worker")}
BOOTSTRAP_HELP = ("Talk to this Kafka cluster (HOST:PORT[,HOST:PORT...]) instead of the local store; "
                  "a cluster that does not answer fails after $KLOG_CLUSTER_TIMEOUT seconds (10).")
_cluster_target = None  # the ClusterTarget of the running command, None for the local store


def current_cluster():  # noqa: ANN201 - the ClusterTarget the running command was given, or None
    return _cluster_target


def _cluster_parameters(has_x: bool) -> list:
    import inspect

    params = [
        ("bootstrap_server", Annotated[str | None, typer.Option(
            "--bootstrap-server", "-b", envvar="KLOG_BOOTSTRAP_SERVERS", show_envvar=True, help=BOOTSTRAP_HELP,
            rich_help_panel="Kafka cluster")]),
        ("cluster", Annotated[str | None, typer.Option(
            "--cluster", help="A cluster named with 'klog clusters add'.", rich_help_panel="Kafka cluster")]),
    ]
    if not has_x:
        params.append(("client_property", Annotated[list[str] | None, typer.Option(
            "--property", "-X", help="Kafka client property name=value for the cluster (security.protocol, "
            "sasl.*, ssl.*, client.id, ...).", rich_help_panel="Kafka cluster")]))
    return [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=hint)
            for name, hint in params]


def cluster_options(callback: Callable[..., Any]) -> Callable[..., Any]:
    """`callback` with --bootstrap-server, --cluster and -X added; they choose the backend open_store
    returns. A command that has its own -X (consume) hands those properties to the cluster client too."""
    import inspect

    sig = inspect.signature(callback, eval_str=True)
    has_x = "prop" in sig.parameters
    extra = _cluster_parameters(has_x)

    @functools.wraps(callback)
    def command(*args: Any, **kwargs: Any) -> Any:
        global _cluster_target
        from klog.client.remote.target import resolve_target

        bootstrap, cluster = kwargs.pop("bootstrap_server"), kwargs.pop("cluster")
        props = kwargs["prop"] if has_x else kwargs.pop("client_property")
        # consume's and produce's own -X are their settings on the local store: only with a cluster are
        # they client properties (but a producer's buffer.memory stays klog's: it bounds klog's buffer)
        from klog.client.producer_settings import SETTINGS

        own = [p for p in props or [] if p.partition("=")[0].strip() in SETTINGS] if has_x else []
        target = resolve_target(kwargs.get("data_dir"), bootstrap, cluster,
                                [p for p in props or [] if p not in own] if (bootstrap or cluster or not has_x)
                                else None)
        if target is not None and has_x:  # every -X goes to the client; the group's own checks see theirs
            kwargs["prop"] = (_group_settings(props) if kwargs.get("group") else None) or own or None
        _cluster_target = target
        try:
            return callback(*args, **kwargs)
        finally:
            _cluster_target = None

    command.__signature__ = sig.replace(parameters=[*sig.parameters.values(), *extra])  # type: ignore[attr-defined]
    command.__annotations__ = {**{p.name: p.annotation for p in sig.parameters.values()},
                               **{p.name: p.annotation for p in extra}}
    command._klog_cluster = True  # type: ignore[attr-defined]
    return command


def _group_settings(props: list[str] | None) -> list[str] | None:
    """The -X pairs klog's group member understands (the others are only for the Kafka client)."""
    from klog.client.group import GroupConfig

    kept = [p for p in props or [] if p.partition("=")[0].strip() in GroupConfig.PROPERTIES]
    return kept or None


def _add_cluster_options(typer_app: typer.Typer, path: tuple[str, ...] = ()) -> None:
    for info in typer_app.registered_commands:
        name = info.name or (info.callback.__name__.replace("_", "-") if info.callback else "")
        if (info.callback is not None and (*path, name.rstrip("-")) in CLUSTER_COMMANDS
                and not hasattr(info.callback, "_klog_cluster")):
            info.callback = cluster_options(info.callback)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            name = group.name or group.typer_instance.info.name or ""
            _add_cluster_options(group.typer_instance, (*path, name))


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


# Command name -> the module that registers it. Only the module of the command being run is
# imported and built (click's "lazy group" idea): Typer builds every registered command's parameters
# on each call, so registering all of them would make `klog consume` pay for `klog spark`.
COMMAND_MODULES = {
    "topics": "topics", "dirs": "dirs", "produce": "produce", "consume": "consume",
    "offsets": "admin", "dump": "admin", "verify": "admin",
    "groups": "groups", "replay": "replay", "spark": "spark", "serve": "serve", "mirror": "mirror",
    "clusters": "clusters", "users": "security", "acls": "security", "quotas": "security",
    "connect": "connect",
}
_registered: set[str] = set()


def _register(modules: set[str] | None = None) -> None:
    import importlib

    _DATA_DIR_OPTION.help = data_dir_help()  # the environment of this run (tests run several)

    wanted = set(COMMAND_MODULES.values()) if modules is None else modules
    # dict order keeps `klog --help` listing commands in COMMAND_MODULES order
    for name in dict.fromkeys(COMMAND_MODULES.values()):
        if name in wanted and name not in _registered:
            _registered.add(name)
            importlib.import_module(f"klog.cli.{name}").register(app)
    _keep_command_order(app)
    _unwrap_help(app)
    _add_cluster_options(app)
    _guard_stdout(app)


def _keep_command_order(typer_app: typer.Typer) -> None:
    """COMMAND_MODULES order, whatever order modules were registered in (one process can run
    several commands: tests, or the generated docs after a command ran)."""
    rank = {name: i for i, name in enumerate(COMMAND_MODULES)}

    def key(info) -> int:  # noqa: ANN001 - a Typer CommandInfo or TyperInfo
        name = info.name or (info.callback.__name__ if info.callback else "")
        return rank.get(name.replace("_", "-"), len(rank))

    typer_app.registered_commands.sort(key=key)
    typer_app.registered_groups.sort(key=key)


def unwrapped(text: str) -> str:
    """Help text as paragraphs: a docstring's line breaks inside a sentence joined (help, man pages and
    completion descriptions are wrapped to the reader's width; only blank lines separate paragraphs)."""
    import inspect
    import re

    paragraphs = re.split(r"\n\s*\n", inspect.cleandoc(text))
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


def _unwrap_help(typer_app: typer.Typer) -> None:
    for info in typer_app.registered_commands:
        text = info.help or (info.callback.__doc__ if info.callback else None)
        if text:
            info.help = unwrapped(text)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            for holder in (group, group.typer_instance.info):
                if isinstance(holder.help, str):
                    holder.help = unwrapped(holder.help)
            _unwrap_help(group.typer_instance)


class StdoutClosed(Exception):  # noqa: N818 - an event, not a failure
    """The reader of stdout went away (`klog consume t | head -1`)."""


def _guard_stdout(typer_app: typer.Typer) -> None:
    """Wrap every command so a write to a closed stdout ends it quietly (exit 0). Typer itself
    turns a BrokenPipeError into exit 1 before run() could see it."""
    for info in typer_app.registered_commands:
        if info.callback is not None and not hasattr(info.callback, "_klog_guarded"):
            info.callback = _pipe_safe(info.callback)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _guard_stdout(group.typer_instance)


def _pipe_safe(callback: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(callback)  # Typer reads the wrapped signature and annotations
    def command(*args: Any, **kwargs: Any) -> Any:
        try:
            return callback(*args, **kwargs)
        except BrokenPipeError:
            if not _stdout_closed():
                raise  # another pipe (a --exec child's stdin): a real error
            raise StdoutClosed from None

    command._klog_guarded = True  # type: ignore[attr-defined]
    return command


def _stdout_closed() -> bool:
    """Whether stdout is a pipe (or socket) nobody reads any more: poll reports POLLERR (POLLHUP)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no real stdout (captured): it cannot be a closed pipe
        return False


def full_app() -> typer.Typer:
    """The app with every command registered (for help, completion and generated docs)."""
    _register()
    return app


def _modules_for(args: list[str]) -> set[str] | None:
    """The modules `args` need: the command's own module, or all (help, completion, unknown words)."""
    if any(k.startswith("_KLOG_COMPLETE") for k in os.environ):
        return None
    for arg in args:
        if arg in ("--version",):
            return set()
        if arg.startswith("-"):
            return None  # root options other than --version: -h/--help lists every command
        module = COMMAND_MODULES.get(arg)
        return {module} if module else None
    return None


class _Signals:
    """SIGTERM raised as KeyboardInterrupt, so it unwinds like Ctrl-C (the main thread only)."""

    terminated = False

    def __enter__(self) -> _Signals:
        import signal
        import threading

        self.terminated = False
        self.old = None
        if threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGTERM, self._stop)
        return self

    def _stop(self, signum: int, frame: object) -> None:
        self.terminated = True
        raise KeyboardInterrupt

    def __exit__(self, *exc: object) -> None:
        import signal

        if self.old is not None:
            signal.signal(signal.SIGTERM, self.old)

    def stopped(self) -> int:
        """The exit code of a stop, its one line on stderr."""
        print("klog: terminated" if self.terminated else "klog: interrupted", file=sys.stderr)
        return ExitStatus.TERMINATED if self.terminated else ExitStatus.INTERRUPTED


def _no_color_help() -> None:
    """NO_COLOR (https://no-color.org): Typer's help without bold and dim too, not only without colour."""
    if os.environ.get("NO_COLOR"):  # imports rich: only then
        import typer.rich_utils

        typer.rich_utils.COLOR_SYSTEM = None


def run(args: list[str] | None = None) -> int:
    """Run klog with `args` (default sys.argv[1:]); returns the exit code, prints one line per error."""
    from klog.cli.argv import move_global_options

    _no_color_help()
    args = move_global_options(sys.argv[1:] if args is None else list(args))
    _register(_modules_for(args))
    with _Signals() as signals:
        return _run(args, signals)


def _run(args: list[str] | None, signals: _Signals) -> int:
    global _data_lost
    _data_lost = False
    set_quiet(False)
    try:
        # without standalone mode Typer returns the exit code of typer.Exit and of Ctrl-C (130)
        rv = app(args=args, standalone_mode=False)
        if isinstance(rv, int) and not isinstance(rv, bool):
            if rv == ExitStatus.INTERRUPTED:
                return signals.stopped()
            return rv
    except KlogError as e:
        print(f"klog: error: {one_line(str(e))}", file=sys.stderr)
        return e.exit_code
    except (KeyboardInterrupt, typer.Abort):
        return signals.stopped()
    except StdoutClosed:
        _quiet_broken_pipe()
        return ExitStatus.OK
    except typer.Exit as e:
        return e.exit_code
    except typer.TyperException as e:  # Typer's own click: usage errors (bad option, missing argument)
        return _usage_error(e)
    except OSError as e:
        print(one_line(f"klog: error: {e.strerror or e}" + (f": {e.filename}" if e.filename else "")), file=sys.stderr)
        return ExitStatus.ERROR
    return ExitStatus.ERROR if _data_lost else ExitStatus.OK


def _usage_error(e: typer.TyperException) -> int:
    """One line naming the problem and where help is; the bare `klog`/`klog topics` prints help."""
    ctx = getattr(e, "ctx", None)
    if type(e).__name__ == "NoArgsIsHelpError" and ctx is not None:
        print(ctx.get_help())
    else:
        where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        print(one_line(f"klog: error: {e.format_message()}{where}"), file=sys.stderr)
    return getattr(e, "exit_code", ExitStatus.USAGE)


def main() -> None:
    """Console entry point: one line on stderr for a KlogError, never a traceback."""
    if os.environ.get("_KLOG_COMPLETE"):  # a console script made before klog.cli.entry: still no Typer run
        from klog.cli.complete import complete

        done = complete()
        if done is not None:
            sys.exit(done)
    code = run()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_broken_pipe()
    sys.exit(code)


def _quiet_broken_pipe() -> None:
    """`klog consume t | head -1`: the reader left; exit without Python's shutdown warning (what
    is still buffered goes to /dev/null, as the Python docs on SIGPIPE recommend)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
