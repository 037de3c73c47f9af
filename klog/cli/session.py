"""What every command's run shares, without Typer (the hot path runs consume and produce without it):
the store or cluster it talks to, warnings, -q, exit codes and how a run ends (an error's one line,
Ctrl-C and SIGTERM, a closed stdout).

Exit codes: 0 success, 1 runtime failure, 2 usage error, 130 interrupted (Ctrl-C), 143 terminated
(SIGTERM). Both signals stop every command the same way: records in hand are finished (a producer
writes the whole lines it read, a group member commits what it printed and leaves its group), then
one line on stderr.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from klog.errors import CorruptLogError, KlogError, UsageError

if TYPE_CHECKING:
    from klog.client.interface import AnyStore


class ExitStatus(IntEnum):
    OK = 0
    ERROR = 1
    USAGE = 2
    INTERRUPTED = 130
    TERMINATED = 143


def one_line(message: str) -> str:
    """A message as exactly one line: control characters (a newline in a topic name, an escape
    sequence in a path) are shown escaped, never acted on by the terminal."""
    if message.isprintable():
        return message
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in message)


_quiet = False  # -q: warnings are not printed (they still count: a data loss still exits 1)
_data_lost = False  # a warning reported committed records lost: the command exits 1 even if it did its work
_cluster_target = None  # the ClusterTarget of the running command, None for the local store


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


def open_store(data_dir: str | None, create: bool = True, read_only: bool = False) -> AnyStore:
    """The store, its warnings on stderr (producers, replays and moves made from it use them too);
    a Kafka cluster behind the same interface when the command was given one (see with_cluster).
    `read_only`: a command that only reads changes nothing and works on a read-only store."""
    if _cluster_target is not None:
        from klog.client.remote.store import RemoteStore

        return RemoteStore(_cluster_target, on_warning=warn)
    from klog.client.store import Store

    return Store(data_dir, create=create, on_warning=warn, read_only=read_only)


def check_data_dir_given(data_dir: str | None) -> None:
    """What the store's own open says of an empty --data-dir, for the commands that read or write a file of
    the store without opening it (clusters.json): '' must not mean the default store."""
    if data_dir is not None and not data_dir.strip():
        raise UsageError("the data directory path is empty (--data-dir '' or KLOG_DATA_DIR='')")


def current_cluster():  # noqa: ANN201 - the ClusterTarget the running command was given, or None
    return _cluster_target


def with_cluster(callback: Callable[..., Any], kwargs: dict[str, Any], has_x: bool) -> Any:
    """Run `callback(**kwargs)` against the cluster that kwargs' bootstrap_server, cluster and
    client_property (or, for a command with its own -X, prop) name; the local store without them."""
    global _cluster_target
    bootstrap, cluster = kwargs.pop("bootstrap_server"), kwargs.pop("cluster")
    props = kwargs["prop"] if has_x else kwargs.pop("client_property")
    # consume's and produce's own -X are their settings on the local store: only with a cluster are
    # they client properties (but a producer's buffer.memory stays klog's: it bounds klog's buffer)
    own: list[str] = []
    console: list[str] = []  # kafka-console-*'s --property names: the command's error names klog's spelling
    if has_x and props:
        from klog.cli.consume_run import CONSOLE_CONSUMER
        from klog.client.producer_settings import CONSOLE_PRODUCER, SETTINGS

        own = [p for p in props if p.partition("=")[0].strip() in SETTINGS]
        console = [p for p in props if p.partition("=")[0].strip() in {*CONSOLE_PRODUCER, *CONSOLE_CONSUMER}]
    cluster_props = [p for p in props or [] if p not in own and p not in console] \
        if (bootstrap or cluster or not has_x) else None
    target = None
    if bootstrap or cluster or cluster_props:  # the local store needs none of the cluster machinery
        from klog.client.remote.target import resolve_target

        if cluster:  # a named cluster is read from the store's clusters.json
            check_data_dir_given(kwargs.get("data_dir"))
        target = resolve_target(kwargs.get("data_dir"), bootstrap, cluster, cluster_props)
    if target is not None and has_x:  # every -X goes to the client; the group's own checks see theirs
        kwargs["prop"] = console or (_group_settings(props) if kwargs.get("group") else None) or own or None
    _cluster_target = target
    try:
        return callback(**kwargs)
    finally:
        _cluster_target = None


def _group_settings(props: list[str] | None) -> list[str] | None:
    """The -X pairs klog's group member understands (the others are only for the Kafka client)."""
    from klog.client.group import GroupConfig

    kept = [p for p in props or [] if p.partition("=")[0].strip() in GroupConfig.PROPERTIES]
    return kept or None


# -- how a run ends ------------------------------------------------------------------------------------
class StdoutClosed(Exception):  # noqa: N818 - an event, not a failure
    """The reader of stdout went away (`klog consume t | head -1`)."""


def pipe_safe(call: Callable[[], Any]) -> Any:
    """`call()`, a write to a closed stdout turned into StdoutClosed (the command ends quietly, exit 0)."""
    try:
        return call()
    except BrokenPipeError:
        if not stdout_closed():
            raise  # another pipe (a --exec child's stdin): a real error
        raise StdoutClosed from None


def stdout_closed() -> bool:
    """Whether stdout is a pipe (or socket) nobody reads any more: poll reports POLLERR (POLLHUP)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no real stdout (captured): it cannot be a closed pipe
        return False


class Signals:
    """SIGTERM raised as KeyboardInterrupt, so it unwinds like Ctrl-C (the main thread only)."""

    terminated = False

    def __enter__(self) -> Signals:
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


def exit_code(call: Callable[[], Any], signals: Signals) -> int:
    """Run one command (`call`); its exit code, after one line on stderr for an error or a stop."""
    global _data_lost
    _data_lost = False
    set_quiet(False)
    try:
        rv = call()
        if isinstance(rv, int) and not isinstance(rv, bool):
            return signals.stopped() if rv == ExitStatus.INTERRUPTED else rv
    except KlogError as e:
        hint = ""
        if isinstance(e, CorruptLogError) and "klog verify" not in str(e):  # consume names its own next step
            hint = "; 'klog verify --repair' says what is damaged and how to get past it"
        print(f"klog: error: {one_line(str(e))}{hint}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return signals.stopped()
    except StdoutClosed:
        quiet_broken_pipe()
        return ExitStatus.OK
    except OSError as e:
        print(one_line(f"klog: error: {e.strerror or e}" + (f": {e.filename}" if e.filename else "")), file=sys.stderr)
        return ExitStatus.ERROR
    return ExitStatus.ERROR if _data_lost else ExitStatus.OK


class ClosedStream:
    """stdin or stdout that the caller closed (`klog produce t <&-`, `klog topics list >&-`): using it
    is one error line (exit 1), as with cat(1); a command that never touches it runs as usual."""

    def __init__(self, name: str) -> None:
        self.name = name

    def _closed(self, *args: object) -> Any:
        import errno

        raise OSError(errno.EBADF, f"standard {self.name} is closed")

    fileno = read = readline = readlines = write = writelines = __iter__ = _closed
    buffer = property(_closed)

    def isatty(self) -> bool:
        return False

    def flush(self) -> None:
        """Nothing was written (a write fails), so there is nothing to flush."""


def guard_standard_streams() -> None:
    """Put /dev/null on each of fds 0, 1, 2 the caller closed, before anything opens a file: else the
    first segment or lock opened would become "stdout" (a --exec child's output, a stray print landing
    in it). Python leaves sys.stdin/stdout/stderr None then; they become ClosedStreams (stderr: dropped)."""
    for fd, name, mode in ((0, "input", os.O_RDONLY), (1, "output", os.O_WRONLY), (2, "error", os.O_WRONLY)):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        null = os.open(os.devnull, mode)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        if fd == 2:  # an error line has nowhere to go; the exit code still tells
            sys.stderr = open(fd, "w", closefd=False)  # noqa: SIM115 - lives as long as the process
        else:
            setattr(sys, ("stdin", "stdout")[fd], ClosedStream(name))


def finish(code: int) -> None:
    """Exit the process with `code`, stdout flushed (a reader gone by now is no error)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        quiet_broken_pipe()
    sys.exit(code)


def quiet_broken_pipe() -> None:
    """`klog consume t | head -1`: the reader left; exit without Python's shutdown warning (what
    is still buffered goes to /dev/null, as the Python docs on SIGPIPE recommend)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
