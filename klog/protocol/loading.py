"""Loading kio, the library of Kafka's generated request and response types, for the cluster
client: lazily, and without the test-only import kio would otherwise pay for."""

from __future__ import annotations

import importlib
import sys


def load_kio() -> None:
    """Import kio's base (once) without hypothesis. kio's phantom types import hypothesis whenever it
    is installed (a test extra here) only to register strategies for property tests of kio itself:
    ~70 ms of a klog command for nothing. Hidden from that one import (a None entry in
    sys.modules makes `import hypothesis` raise ImportError, which kio expects), then restored.
    A process that imported hypothesis already (pytest) imports kio as usual."""
    if "kio.static._phantom" in sys.modules or "hypothesis" in sys.modules:
        return
    sys.modules["hypothesis"] = None  # type: ignore[assignment]
    try:
        importlib.import_module("kio.static._phantom")
    finally:
        del sys.modules["hypothesis"]
