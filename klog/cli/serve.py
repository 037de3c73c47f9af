"""`klog serve`: the store over Kafka's wire protocol, in the foreground until SIGTERM/SIGINT."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from klog.cli.app import DataDirOpt
from klog.errors import KlogError, UsageError


def _address(option: str, text: str) -> tuple[str, int]:
    from klog.server.server import parse_hostport

    try:
        return parse_hostport(text)
    except ValueError as e:
        raise UsageError(f"{option}: {e}") from None


SERVE_HELP = (
    "Serve the store to Kafka clients (librdkafka, kcat, the Java client, kafka-python, ...) over Apache Kafka's "
    "wire protocol, while local klog commands keep working on the same store.\n\n"
    "Produce (acks 0/1/all, idempotent producers, every codec), Fetch (long polling, zero-copy), ListOffsets, "
    "Metadata (auto-creates topics per the store's auto.create.topics.enable), consumer groups, and the admin "
    "APIs for topics, partitions, configs, log directories and delete-records. Transactions are refused "
    "(TRANSACTIONAL_ID_AUTHORIZATION_FAILED). Try: kcat -b 127.0.0.1:9092 -L\n\n"
    "Runs in the foreground with one start-up line on stderr. SIGTERM or Ctrl-C stops it cleanly: requests in "
    "flight are answered, files flushed and closed, exit 0. A port in use is exit 1."
)


def register(app: typer.Typer) -> None:
    """Add the `serve` command to the root app."""

    @app.command(help=SERVE_HELP)
    def serve(
        listen: Annotated[str, typer.Option("--listen", "-l", help="HOST:PORT to listen on (0.0.0.0:9092 for "
                                            "every interface; port 0 picks a free one).")] = "127.0.0.1:9092",
        advertised_listener: Annotated[str | None, typer.Option(
            "--advertised-listener", help="HOST:PORT clients are told to connect to (default: the listen "
            "address; set it when clients reach this machine by another name).")] = None,
        node_id: Annotated[int, typer.Option("--node-id", help="This broker's node id in metadata.")] = 0,
        verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log connections and every request "
                                              "error on stderr.")] = False,
        data_dir: DataDirOpt = None,
    ) -> None:
        import logging

        host, port = _address("--listen", listen)
        advertised = _address("--advertised-listener", advertised_listener) if advertised_listener else None
        if node_id < 0:
            raise UsageError("--node-id must be 0 or more")
        logging.basicConfig(stream=sys.stderr, format="klog serve: %(message)s",
                            level=logging.INFO if verbose else logging.WARNING)
        from klog.server.server import Server

        server = Server(data_dir, listen=(host, port), advertised=advertised, node_id=node_id)

        def started(s: Server) -> None:
            print(s.startup_line(), file=sys.stderr, flush=True)

        try:
            server.run(on_started=started)
        except OSError as e:  # address in use, not ours to bind, ...: a runtime failure (exit 1)
            raise KlogError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
