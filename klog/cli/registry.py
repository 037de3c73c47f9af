"""`klog registry`: a Confluent Schema Registry (klog.registry) over the store or a cluster, in the foreground."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from klog.cli.app import DataDirOpt, open_store

REGISTRY_HELP = (
    "Serve Confluent Schema Registry's REST API (the subset Kafka Connect's AvroConverter and JsonSchemaConverter, "
    "confluent-kafka's SchemaRegistryClient and its Avro, JSON and Protobuf serializers use) for Avro, JSON Schema "
    "and Protobuf schemas: subjects, versions, ids, references, lookups, "
    "deletes, compatibility levels (BACKWARD by default) and checks. Schemas live where Confluent keeps them, in "
    "the compacted topic _schemas of the store (or, with --bootstrap-server, the cluster), so ids and versions "
    "survive restarts. Run one registry per store or cluster.\n\n"
    "Runs in the foreground with one start-up line on stderr; each refused request is one line there. SIGTERM or "
    "Ctrl-C stops it (exit 0). A port in use is exit 1."
)


def register(app: typer.Typer) -> None:
    """Add the `registry` command to the root app."""

    @app.command(help=REGISTRY_HELP)
    def registry(
        listen: Annotated[str, typer.Option(
            "--listen", "-l", help="HOST:PORT to listen on (0.0.0.0 for every interface; port 0 picks a free "
            "one).")] = "127.0.0.1:8081",
        data_dir: DataDirOpt = None,
    ) -> None:
        import signal
        import threading

        from klog.errors import KlogError, UsageError

        host, _, port_text = listen.rpartition(":")
        if not host or not port_text.isdigit() or int(port_text) > 65535:
            raise UsageError(f"--listen: {listen!r} is not HOST:PORT")
        try:
            import fastavro  # noqa: F401 - the registry parses and checks schemas with it
        except ImportError:
            raise UsageError("klog registry needs the fastavro package: pip install 'klog[connect]'") from None
        from klog.registry.schemas import Registry
        from klog.registry.server import RegistryServer

        store = open_store(data_dir)
        stop = threading.Event()
        try:
            schemas = Registry(store)
            try:
                try:
                    server = RegistryServer(schemas, host.strip("[]"), int(port_text))
                except OSError as e:
                    raise KlogError(f"cannot listen on {listen}: {e.strerror or e}") from None
                server.start()
                old = signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
                print(f"klog registry: serving on http://{host}:{server.port} ({len(schemas.subjects())} subjects; "
                      "Ctrl-C stops)", file=sys.stderr)
                try:
                    while not stop.wait(0.2):
                        pass
                except KeyboardInterrupt:
                    pass
                finally:
                    signal.signal(signal.SIGTERM, old)
                    server.close()
            finally:
                schemas.close()
        finally:
            store.close()
