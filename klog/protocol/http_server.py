"""The HTTP server under klog's REST faces (Connect's REST API, the Schema Registry): one thread per
connection, a backlog for bursts, and no traceback for a client that goes away."""

from __future__ import annotations

import sys
from http.server import ThreadingHTTPServer

IDLE_TIMEOUT_S = 30.0  # Jetty's default idle timeout: a slowloris socket is closed after it


class QuietHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the listen backlog: a burst of clients is queued, not refused (default 5)

    def handle_error(self, request, client_address) -> None:  # noqa: ANN001
        """A client that resets or times out mid-answer is no server error: no traceback in the log."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)
