"""`klog connect run CONFIG...`: Kafka Connect's standalone worker (klog.connect) in the foreground."""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer

from klog.cli.app import DataDirOpt, open_store, warn

app = typer.Typer(help="Kafka Connect: run connectors between topics and files, databases, HTTP endpoints "
                       "(Kafka's FileStream, Confluent's JDBC sink and Debezium's PostgreSQL configs run as they are).",
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
    configs: Annotated[list[str], typer.Argument(help="Connector config files (.json or .properties).",
                                                 metavar="CONFIG...")],
    worker_config: Annotated[str | None, typer.Option(
        "--worker-config", "-w", help="Worker properties (key.converter, value.converter, offset.flush.interval.ms, "
        "offset.storage.topic, ...), as connect-standalone's first file.")] = None,
    data_dir: DataDirOpt = None,
) -> None:
    from klog.connect.config import load_config_file
    from klog.connect.worker import WORKER, Worker, ignored_warning, validate
    from klog.errors import KlogError, UsageError

    worker_props = load_config_file(worker_config) if worker_config else {}
    worker_parsed = WORKER.parse(worker_props)
    validated = [validate(load_config_file(path), worker_parsed) for path in configs]  # all, before any starts
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
        try:
            for v in validated:
                worker.start(v)
            print(f"klog connect: running {', '.join(names)} (Ctrl-C stops)", file=sys.stderr)
            while worker.alive():
                time.sleep(0.1)
        finally:
            worker.stop()
    finally:
        store.close()
    if worker.failures:
        name, task_id, error = worker.failures[0]
        raise KlogError(f"connector '{name}' task {task_id} failed: {error}")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="connect")
