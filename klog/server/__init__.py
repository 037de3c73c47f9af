"""`klog serve`: a klog store served over Apache Kafka's wire protocol.

    from klog.server import Server
    with Server(data_dir, listen=("127.0.0.1", 0)) as server:   # runs in a background thread
        print(server.port)

Layers: klog.protocol (framing: size-prefixed frames, request/response headers via kio; API
keys; error codes), dispatch.py (the registry: api key -> handler and its version range;
ApiVersions is generated from it), context.py (what a handler gets), one module per family of
APIs, server.py (asyncio listener).
kio is imported only here, never by `klog --help` or the other commands.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name in ("Server", "serve"):
        from klog.server import server

        return getattr(server, name)
    raise AttributeError(f"module 'klog.server' has no attribute {name!r}")


__all__ = ["Server", "serve"]
