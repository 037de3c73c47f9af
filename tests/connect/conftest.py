"""A real PostgreSQL server for the connect tests (Debian's postgresql package), started once per session
in a temporary directory as an unprivileged user on 127.0.0.1 with wal_level=logical; each test gets
its own database. Skipped, with the reason, where PostgreSQL or psycopg2 is not installed."""

from __future__ import annotations

import pytest

from tests.connect.pg_server import PostgresServer, find_pg_bin


@pytest.fixture(scope="session")
def pg_server():
    bin_dir = find_pg_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL server binaries not found (Debian: apt-get install postgresql; tests/run.sh does it "
                    "when root)")
    pytest.importorskip("psycopg2", reason="psycopg2 is not installed (pip install 'klog[connect]')")
    server = PostgresServer(bin_dir)
    try:
        server.start()
    except RuntimeError as e:
        server.stop()
        pytest.skip(f"PostgreSQL could not be started here: {e}")
    yield server
    server.stop()


@pytest.fixture
def pg_db(pg_server, request):
    """A fresh database (name from the test), dropped with its replication slots afterwards."""
    name = pg_server.create_database(request.node.name)
    yield pg_server.database(name)
    pg_server.drop_database(name)
