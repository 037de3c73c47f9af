"""The `klog` command: Typer parsing and rendering only; every command is one library call.
What a run shares with the hot path (the store, warnings, exit codes) is klog.cli.session."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from klog.cli import placeholders
from klog.cli.session import (  # noqa: F401 - the names commands import from here
    ExitStatus,
    Signals,
    StdoutClosed,
    current_cluster,
    exit_code,
    finish,
    one_line,
    open_store,
    pipe_safe,
    set_quiet,
    warn,
    with_cluster,
)

placeholders.apply()


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


# -- the cluster backend: one option set, added to the commands that work against a cluster ----
CLUSTER_COMMANDS = {("produce",), ("consume",), ("offsets",),
                    ("topics", "list"), ("topics", "describe"), ("topics", "create"), ("topics", "alter"),
                    ("topics", "delete"), ("groups", "list"), ("groups", "describe"), ("groups", "reset-offsets"),
                    ("groups", "delete"), ("groups", "delete-offsets"), ("replay",), ("spark", "export"),
                    ("spark", "sql"), ("spark", "stream"), ("spark", "run"),
                    ("connect", "run"), ("connect", "worker"), ("registry",),
                    ("transactions", "list"), ("transactions", "describe"), ("transactions", "abort"),
                    ("transactions", "find-hanging")}
BOOTSTRAP_HELP = ("Talk to this Kafka cluster (HOST:PORT[,HOST:PORT...]) instead of the local store; "
                  "a cluster that does not answer fails after $KLOG_CLUSTER_TIMEOUT seconds (10).")
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
    def command(**kwargs: Any) -> Any:
        return with_cluster(callback, kwargs, has_x)

    command.__signature__ = sig.replace(parameters=[*sig.parameters.values(), *extra])  # type: ignore[attr-defined]
    command.__annotations__ = {**{p.name: p.annotation for p in sig.parameters.values()},
                               **{p.name: p.annotation for p in extra}}
    command._klog_cluster = True  # type: ignore[attr-defined]
    return command


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
    "transactions": "transactions",
    "connect": "connect", "registry": "registry",
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
        return pipe_safe(lambda: callback(*args, **kwargs))

    command._klog_guarded = True  # type: ignore[attr-defined]
    return command


def app_with(modules: set[str]) -> typer.Typer:
    """The app with the commands of `modules` registered (klog.cli.hot reads the hot commands' spec)."""
    _register(modules)
    return app


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


def _no_color_help() -> None:
    """NO_COLOR (https://no-color.org): Typer's help without bold and dim too, not only without colour."""
    if os.environ.get("NO_COLOR"):  # imports rich: only then
        import typer.rich_utils

        typer.rich_utils.COLOR_SYSTEM = None


def run(args: list[str] | None = None) -> int:
    """Run klog with `args` (default sys.argv[1:]); returns the exit code, prints one line per error.
    consume and produce take the hot path (klog.cli.hot) when it can parse their arguments."""
    from klog.cli.argv import move_global_options
    from klog.cli.hot import run_hot

    args = move_global_options(sys.argv[1:] if args is None else list(args))
    code = run_hot(args)
    if code is not None:
        return code
    _no_color_help()
    _register(_modules_for(args))
    with Signals() as signals:
        return exit_code(lambda: _typer_run(args), signals)


def _typer_run(args: list[str]) -> int | None:
    """Typer's run of `args`; its usage errors as one line, its Exit as its code."""
    try:
        # without standalone mode Typer returns the exit code of typer.Exit and of Ctrl-C (130)
        # prog_name: `klog` under `python -m klog` too (usage lines, --install-completion's file and _KLOG_COMPLETE)
        return app(args=args, prog_name="klog", standalone_mode=False)
    except typer.Abort:
        raise KeyboardInterrupt from None
    except typer.Exit as e:
        return e.exit_code
    except typer.TyperException as e:  # Typer's own click: usage errors (bad option, missing argument)
        return _usage_error(e)


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
    finish(run())
