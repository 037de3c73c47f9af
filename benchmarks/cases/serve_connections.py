"""`klog serve`'s memory with many idle connections: RSS idle, with 250 to 1,000 of them, and after.

Each connection is accepted and holds its task, reader and buffers; none sends anything (a client
between requests). The figure is the RSS growth per connection (target, issue 26: flat with
connections, i.e. a few KiB each, nothing per connection that grows with time or traffic).
"""

from __future__ import annotations

import os
import socket
import time

from harness import REPO, Bench
from serve_process import Serve


def run(bench: Bench) -> None:
    import klog
    from tests.serve_helpers import RawClient

    counts = (250, 500, 1000) if not bench.smoke else (10,)
    data = os.path.join(bench.tmp, "data")
    with klog.open(data) as store:
        store.create_topic("free")
    server = Serve(data, {**os.environ, "PYTHONPATH": REPO})
    socks: list[socket.socket] = []
    try:
        with RawClient(server.port) as client:  # the handlers imported, as in a server that has served
            client.send(18, 3, client_software_name="bench", client_software_version="1")
        time.sleep(0.5)
        idle = server.rss_mib()
        bench.line(f"serve RSS idle: {idle:.1f} MiB")
        for n in counts:
            while len(socks) < n:
                socks.append(socket.create_connection(("127.0.0.1", server.port)))
            time.sleep(1.0)
            rss = server.rss_mib()
            each = (rss - idle) * 1024 / n
            bench.line(f"serve RSS with {n} idle connections: {rss:.1f} MiB (+{each:.1f} KiB a connection)")
        for sock in socks:
            sock.close()
        socks.clear()
        time.sleep(1.0)
        bench.line(f"serve RSS after they closed: {server.rss_mib():.1f} MiB")
    finally:
        for sock in socks:
            sock.close()
        server.close()
