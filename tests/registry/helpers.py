"""klog's registry served for a test: over the store at a data dir, on an ephemeral port of 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import klog
from klog.registry.schemas import Registry
from klog.registry.server import RegistryServer


@contextmanager
def serving(data_dir: str) -> Iterator[str]:
    """A registry over its own store at data_dir (as a separate `klog registry` would run); its base URL."""
    store = klog.open(data_dir)
    registry = Registry(store)
    server = RegistryServer(registry, "127.0.0.1", 0, log=lambda line: None).start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.close()
        registry.close()
        store.close()
