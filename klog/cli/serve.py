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
    "APIs for topics, partitions, configs, log directories and delete-records, and transactions (exactly-once "
    "producers, read_committed consumers; docs/transactions.md). Try: kcat -b 127.0.0.1:9092 -L\n\n"
    "Runs in the foreground with one start-up line on stderr. SIGTERM or Ctrl-C stops it cleanly: requests in "
    "flight are answered, files flushed and closed, exit 0. A port in use is exit 1."
)


def register(app: typer.Typer) -> None:
    """Add the `serve` command to the root app."""

    @app.command(help=SERVE_HELP)
    def serve(
        listen: Annotated[list[str] | None, typer.Option(
            "--listen", "-l", help="[PROTOCOL://]HOST:PORT to listen on, repeatable; PROTOCOL is PLAINTEXT (the "
            "default), SSL, SASL_PLAINTEXT or SASL_SSL (0.0.0.0 for every interface; port 0 picks a free one; "
            "default 127.0.0.1:9092).")] = None,
        advertised_listener: Annotated[str | None, typer.Option(
            "--advertised-listener", help="HOST:PORT clients are told to connect to (default: the listen "
            "address; set it when clients reach this machine by another name).")] = None,
        node_id: Annotated[int, typer.Option("--node-id", help="This broker's node id in metadata.")] = 0,
        verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log connections and every request "
                                              "error on stderr.")] = False,
        ssl_cert: Annotated[str | None, typer.Option("--ssl-cert", help="TLS certificate (PEM) for SSL and "
                                                     "SASL_SSL listeners.")] = None,
        ssl_key: Annotated[str | None, typer.Option("--ssl-key", help="Its private key (PEM).")] = None,
        ssl_ca: Annotated[str | None, typer.Option("--ssl-ca", help="CA certificates (PEM) trusted for client "
                                                   "certificates (mTLS).")] = None,
        ssl_client_auth: Annotated[str, typer.Option("--ssl-client-auth", help="none, requested or required: "
                                                     "client certificates; the principal is User:<subject DN>.")]
        = "none",
        sasl_mechanism: Annotated[list[str] | None, typer.Option(
            "--sasl-mechanism", help="SASL mechanisms offered (repeatable; default PLAIN, SCRAM-SHA-256, "
            "SCRAM-SHA-512; users from `klog users`).")] = None,
        insecure: Annotated[bool, typer.Option("--insecure", help="Allow a PLAINTEXT or SASL_PLAINTEXT "
                                               "listener on a non-loopback address (PLAINTEXT: anyone who reaches "
                                               "it is User:ANONYMOUS; SASL_PLAINTEXT: passwords cross the network "
                                               "in clear text).")] = False,
        auth_failure_delay_ms: Annotated[int, typer.Option(
            "--auth-failure-delay-ms", help="Delay before a failed authentication is answered and the "
            "connection closed (slows password guessing).")] = 1000,
        max_connections: Annotated[int | None, typer.Option(
            "--max-connections", help="Connections open at once, all clients together (Kafka's "
            "max.connections; default: the open-file limit less a quarter kept for the store). Beyond it a "
            "new connection is closed at once.")] = None,
        max_connections_per_ip: Annotated[int | None, typer.Option(
            "--max-connections-per-ip", help="Connections open at once from one address (Kafka's "
            "max.connections.per.ip; default unbounded).")] = None,
        max_connections_per_ip_overrides: Annotated[str, typer.Option(
            "--max-connections-per-ip-overrides", help="Per-address exceptions, HOST:COUNT[,HOST:COUNT...] "
            "(Kafka's max.connections.per.ip.overrides).")] = "",
        max_request_entries: Annotated[int | None, typer.Option(
            "--max-request-entries", help="Array entries one request may hold (partitions, topics, members, "
            "all summed; default 20000); a request over it is answered INVALID_REQUEST unread.")] = None,
        client_share: Annotated[str | None, typer.Option(
            "--client-share", help="The fraction of each server-wide pool (group member data, members, groups, "
            "transactional ids, offset growth) one client may hold: one authenticated principal, or one address "
            "where clients do not authenticate (default 0.25).")] = None,
        data_dir: DataDirOpt = None,
    ) -> None:
        import logging

        from klog.server.listeners import SASL_MECHANISMS, SecurityConfig, parse_listener

        listeners = [parse_listener(text) for text in listen or ["127.0.0.1:9092"]]
        security = SecurityConfig(listeners, ssl_cert, ssl_key, ssl_ca, ssl_client_auth.lower(),
                                  tuple(m.upper() for m in sasl_mechanism or SASL_MECHANISMS), insecure,
                                  auth_failure_delay_ms)
        security.validate()
        if auth_failure_delay_ms < 0:
            raise UsageError("--auth-failure-delay-ms must be 0 or more")
        host, port = listeners[0].host, listeners[0].port
        advertised = _address("--advertised-listener", advertised_listener) if advertised_listener else None
        if node_id < 0:
            raise UsageError("--node-id must be 0 or more")
        logging.basicConfig(stream=sys.stderr, format="klog serve: %(message)s",
                            level=logging.INFO if verbose else logging.WARNING)
        from klog.server.limits import ServeLimits, parse_overrides, parse_share
        from klog.server.server import Server

        limits = ServeLimits(max_connections=max_connections, per_ip_overrides=parse_overrides(
            max_connections_per_ip_overrides))
        if max_connections_per_ip is not None:
            limits.max_connections_per_ip = max_connections_per_ip
        if max_request_entries is not None:
            limits.max_request_entries = max_request_entries
        if client_share is not None:
            limits.client_share = parse_share(client_share)
        limits.validate()
        server = Server(data_dir, listen=(host, port), advertised=advertised, node_id=node_id, security=security,
                        limits=limits)

        def started(s: Server) -> None:
            print(s.startup_line(), file=sys.stderr, flush=True)
            for warning in security.warnings():
                print(f"klog serve: warning: {warning}", file=sys.stderr, flush=True)

        try:
            server.run(on_started=started)
        except OSError as e:  # address in use, not ours to bind, ...: a runtime failure (exit 1)
            raise KlogError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
