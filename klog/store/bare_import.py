"""One compiled module of a package, imported without running its packages' __init__ files.

aiokafka's and confluent-kafka's __init__ files load their whole clients (asyncio and more: ~60 ms,
a sixth of a 1 M-record consume); klog wants one extension module of each (the record reader and
builder, the murmur2 partitioner), ~3 ms. Python's import lock is held while the bare package
objects are in sys.modules: another thread's import waits and never sees one, and two threads'
first loads never take each other's entries out (KeyError: 'aiokafka' failed a Connect worker's
sink task when two of them read their first large batch at once).
"""

from __future__ import annotations

import _imp
import importlib
import importlib.util
import sys
from types import ModuleType


def import_bare(module: str) -> ModuleType:
    """`module` (e.g. aiokafka.record._crecords.default_records) with its parent packages present
    only while it loads, their __init__ not run. Every module of its package is then out of
    sys.modules again, so a later `import aiokafka` runs its __init__ as usual and sets its
    submodules as attributes (a module left in sys.modules is found there and never set as one:
    `confluent_kafka.cimpl` was missing); the module it loads again is another object with the same
    types (an extension module is initialised once per process). The plain import if the top
    package is loaded already. Raises ImportError when it is missing (or a parent is no package)."""
    parts = module.split(".")
    parents = [".".join(parts[:i]) for i in range(1, len(parts))]
    if not parents or parents[0] in sys.modules:
        return importlib.import_module(module)
    _imp.acquire_lock()
    try:
        if parents[0] in sys.modules:  # (another thread loaded it meanwhile)
            return importlib.import_module(module)
        top, before = parents[0], set(sys.modules)
        try:
            for name in parents:  # the package objects only
                spec = importlib.util.find_spec(name)
                if spec is None or spec.submodule_search_locations is None:
                    raise ImportError(f"{name} is not a package", name=name)
                sys.modules[name] = importlib.util.module_from_spec(spec)
            return importlib.import_module(module)
        finally:  # (the module's own imports of its package's modules too: aiokafka.errors, ...)
            for name in [n for n in sys.modules if n not in before and (n == top or n.startswith(top + "."))]:
                del sys.modules[name]
    finally:
        _imp.release_lock()
