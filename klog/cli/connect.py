"""`klog connect run CONFIG...`: Kafka Connect's standalone worker (klog.connect) in the foreground."""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer

from klog.cli.app import DataDirOpt, open_store, warn

app = typer.Typer(help="Kafka Connect: run connectors between topics and files, databases, HTTP endpoints "
                       "(Kafka's FileStream, Confluent's JDBC sink and source, Debezium's PostgreSQL and JDBC sink "
                       "configs run as they are).",
                  no_args_is_help=True)

RUN_HELP = (
    "Run connectors from their configs (JSON, or .properties as connect-standalone takes them) until Ctrl-C or "
    "SIGTERM, which stop every task after committing its offsets. Source offsets, configs and statuses live in "
    "the compacted topics connect-offsets, connect-configs and connect-status, so a restart resumes where it "
    "stopped. An invalid config is refused before anything starts, naming the field (exit 2); keys klog does not "
    "implement are named in one warning."
)


@app.command(help=RUN_HELP)
def run(
    configs: Annotated[list[str] | None, typer.Argument(help="Connector config files (.json or .properties).",
                                                        metavar="CONFIG...")] = None,
    listen: Annotated[str, typer.Option(
        "--listen", help="HOST:PORT of Kafka Connect's REST API (connectors added, paused, restarted, deleted "
        "while running; 'none' for no API). A port in use: a warning, and no API.")] = "127.0.0.1:8083",
    worker_config: Annotated[str | None, typer.Option(
        "--worker-config", "-w", help="Worker properties (key.converter, value.converter, offset.flush.interval.ms, "
        "offset.storage.topic, ...), as connect-standalone's first file.")] = None,
    data_dir: DataDirOpt = None,
) -> None:
    from klog.connect.worker import WORKER, Worker, ignored_warning
    from klog.errors import KlogError, UsageError

    if not configs and listen.lower() == "none":
        raise UsageError("nothing to run: give connector configs, or keep the REST API (--listen) to add them")
    worker_props = _worker_props(worker_config)
    validated = _validated(configs or [], WORKER.parse(worker_props))  # all, first
    names = [v.name for v in validated]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise UsageError(f"two configs name the same connector: {', '.join(twice)}")
    for v in validated:
        if (message := ignored_warning(v)) is not None:
            warn(message)
    store = open_store(data_dir)
    try:
        worker = Worker(store, worker_props, warn=warn)
        rest = None
        try:
            for v in validated:
                worker.start(v)
            rest = _start_rest(worker, listen)
            where = f"; REST API on http://{listen.rsplit(':', 1)[0]}:{rest.port}" if rest else ""
            print(f"klog connect: running {', '.join(names) or 'no connector yet'}{where} (Ctrl-C stops)",
                  file=sys.stderr)
            while worker.alive() or (rest is not None and not _all_failed(worker)):
                time.sleep(0.1)
        finally:
            if rest is not None:
                rest.close()
            worker.stop()
    finally:
        store.close()
    if worker.failures:
        name, task_id, error = worker.failures[0]
        raise KlogError(f"connector '{name}' task {task_id} failed: {error}")


WORKER_HELP = (
    "A distributed worker: every `klog connect worker` of the same --group-id (on this machine or others, on "
    "the same store or cluster) shares the connectors' tasks through Kafka's group protocol, and takes over the "
    "tasks of a worker that stops or dies (after session.timeout.ms, 10 s by default, in --worker-config). "
    "CONFIGs given here are submitted to the group (written to connect-configs) and run wherever the group "
    "assigns their tasks. Ctrl-C or SIGTERM stops this worker's tasks after committing their offsets; the "
    "others take them over."
)


@app.command(help=WORKER_HELP)
def worker(
    group_id: Annotated[str, typer.Option("--group-id", "-g", help="The workers' group (Kafka Connect's group.id).")],
    configs: Annotated[list[str] | None, typer.Argument(help="Connector configs to submit to the group.",
                                                        metavar="[CONFIG...]")] = None,
    worker_config: Annotated[str | None, typer.Option(
        "--worker-config", "-w", help="Worker properties (converters, offset.flush.interval.ms, "
        "session.timeout.ms, consumer.session.timeout.ms, ...).")] = None,
    listen: Annotated[str, typer.Option(
        "--listen", help="HOST:PORT of Kafka Connect's REST API for the whole group (any worker's serves it; "
        "'none' for no API). A port in use: a warning, and no API.")] = "127.0.0.1:8083",
    data_dir: DataDirOpt = None,
) -> None:
    import os
    import socket

    from klog.connect.distributed import DistributedWorker
    from klog.connect.worker import WORKER, ignored_warning

    worker_props = _worker_props(worker_config, distributed=True)
    validated = _validated(configs or [], WORKER.parse(worker_props))
    for v in validated:
        if (message := ignored_warning(v)) is not None:
            warn(message)
    store = open_store(data_dir)
    try:
        dw = DistributedWorker(store, group_id, worker_props, warn, worker_id=f"{socket.gethostname()}:{os.getpid()}")
        rest = None
        try:
            for v in validated:
                dw.submit(v)
            from klog.connect.group_api import GroupApi

            rest = _start_rest(GroupApi(dw), listen)
            where = f"; REST API on http://{listen.rsplit(':', 1)[0]}:{rest.port}" if rest else ""
            print(f"klog connect: worker {socket.gethostname()}:{os.getpid()} in group {group_id}{where} "
                  "(Ctrl-C stops)", file=sys.stderr)
            dw.run()
        finally:
            if rest is not None:
                rest.close()
            dw.close()
    finally:
        store.close()


# the worker properties klog's workers read besides WORKER's keys: these prefixes (the clients' and the
# converters' settings), and a distributed worker's session.timeout.ms
WORKER_PREFIXES = ("producer.", "consumer.", "admin.", "key.converter.", "value.converter.")
# keys that mark a worker's properties (connect-standalone's first file), not a connector's
WORKER_MARKS = ("bootstrap.servers", "key.converter", "value.converter", "offset.storage.", "plugin.path",
                "offset.flush.interval.ms")


def _worker_props(path: str | None, distributed: bool = False) -> dict[str, str]:
    """--worker-config's properties; the keys klog's workers do not read named in one warning."""
    from klog.connect.config import load_config_file
    from klog.connect.worker import WORKER

    if not path:
        return {}
    props = load_config_file(path)
    known = set(WORKER.keys) | ({"session.timeout.ms"} if distributed else set())
    ignored = sorted(k for k in props if k not in known and not k.startswith(WORKER_PREFIXES))
    if ignored:
        hint = (" (klog's workers use the local store, or the cluster given with -b/--bootstrap-server)"
                if "bootstrap.servers" in ignored else "")
        warn(f"worker config {path}: klog does not use these keys and ignores them: {', '.join(ignored)}{hint}")
    return props


def _validated(paths: list[str], worker_parsed: dict) -> list:
    """Each connector config validated (all of them before anything starts); with several files, an error
    names the file, and a worker's properties given as a connector's (connect-standalone's first
    argument) say to use -w."""
    from klog.connect.config import load_config_file
    from klog.connect.worker import validate
    from klog.errors import UsageError

    out = []
    for path in paths:
        props = load_config_file(path)
        looks_like_worker = "connector.class" not in props and any(
            k.startswith(WORKER_MARKS) for k in props)
        try:
            out.append(validate(props, worker_parsed))
        except UsageError as e:
            if looks_like_worker:
                raise UsageError(f"{path} looks like a worker's properties (no connector.class): use "
                                 f"-w/--worker-config {path} for the worker's properties, then the connector "
                                 "configs") from None
            if len(paths) > 1:
                raise UsageError(f"{path}: {e}") from None
            raise
    return out


def _all_failed(worker) -> bool:  # noqa: ANN001 - a Worker
    """With the REST API up the worker keeps serving, unless every task it had has failed."""
    return bool(worker.failures) and not worker.alive()


def _start_rest(worker, listen: str):  # noqa: ANN001, ANN202 - a Worker; a RestServer or None
    if listen.lower() == "none":
        return None
    from klog.connect.rest import RestServer
    from klog.errors import UsageError

    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--listen: use HOST:PORT, not '{listen}'")
    try:
        return RestServer(worker, host, int(port)).start()
    except OSError as e:
        warn(f"no REST API: cannot listen on {listen}: {e.strerror or e}")
        return None


# -- the REST API from the shell ------------------------------------------------------------------------
UrlOpt = Annotated[str, typer.Option("--url", envvar="KLOG_CONNECT_URL", show_envvar=True,
                                     help="The worker's REST API.")]
DEFAULT_URL = "http://127.0.0.1:8083"
REBALANCE_WAIT_S = 10.0  # how long a request refused by a worker's rebalance is asked again


def _call(url: str, method: str, path: str, body: object = None):  # noqa: ANN202 - parsed JSON or None
    import http.client
    import json
    import urllib.error
    import urllib.parse
    import urllib.request

    from klog.errors import KlogError, UsageError

    try:
        parts = urllib.parse.urlsplit(url)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # '[::1' (no closing bracket), a port that is not a number or past 65535
        valid = False
    if not valid:
        raise UsageError(f"invalid --url '{url}': use http://HOST:PORT")
    import time

    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url.rstrip("/") + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    deadline = time.monotonic() + REBALANCE_WAIT_S
    while True:
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                text = resp.read()
            break
        except http.client.InvalidURL as e:  # what urlsplit lets through: a space or control character
            raise UsageError(f"invalid --url '{url}': {e}") from None
        except urllib.error.HTTPError as e:
            try:
                message = json.loads(e.read()).get("message", e.reason)
            except (ValueError, AttributeError):
                message = e.reason
            # a distributed worker in a rebalance (or with stale configs) did nothing with the request
            # and says so with 409 "Cannot complete request ...": asked again, as Connect's clients do
            if e.code == 409 and str(message).startswith("Cannot complete request") \
                    and time.monotonic() < deadline:
                time.sleep(0.25)
                continue
            raise (UsageError if e.code == 404 else KlogError)(str(message)) from None
        except (urllib.error.URLError, OSError) as e:
            raise KlogError(f"no Connect worker answers at {url}: {getattr(e, 'reason', e)}") from None
    try:
        return json.loads(text) if text else None
    except ValueError:  # an HTTP server, but not Kafka Connect's REST API
        raise KlogError(f"{url} answered {path} with something other than JSON: is it a Connect worker?") from None


@app.command("list")
def list_(url: UrlOpt = DEFAULT_URL) -> None:
    """The worker's connectors and their states."""
    for name, info in sorted((_call(url, "GET", "/connectors?expand=status") or {}).items()):
        status = info["status"]
        tasks = ", ".join(f"{t['id']}:{t['state']}" for t in status["tasks"])
        print(f"{name}\t{status['type']}\t{status['connector']['state']}\t{tasks}")


@app.command()
def status(name: str, url: UrlOpt = DEFAULT_URL) -> None:
    """A connector's status as Kafka Connect reports it (JSON)."""
    import json
    from urllib.parse import quote

    print(json.dumps(_call(url, "GET", f"/connectors/{quote(name, safe='')}/status"), indent=2))


def _verb(method: str, suffix: str, done: str):  # noqa: ANN202
    def command(name: str, url: UrlOpt = DEFAULT_URL) -> None:
        from urllib.parse import quote

        _call(url, method, f"/connectors/{quote(name, safe='')}{suffix}")
        print(f"{done} connector {name}", file=sys.stderr)

    return command


app.command("pause", help="Pause a connector's tasks (they keep their place).")(_verb("PUT", "/pause", "Paused"))
app.command("resume", help="Resume a paused connector.")(_verb("PUT", "/resume", "Resumed"))
app.command("restart", help="Restart a connector and its tasks.")(
    _verb("POST", "/restart?includeTasks=true", "Restarted"))
app.command("delete", help="Stop and remove a connector (its offsets stay).")(_verb("DELETE", "", "Deleted"))


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="connect")
