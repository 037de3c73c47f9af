"""klog's packages form layers and every import points down (issue 24; docs/architecture.md):

    errors  <-  store | security | protocol  <-  meta  <-  broker  <-  client  <-  cli | server | spark | connect
                                                                                   | registry

A package imports its own layer's package and the layers below, never one above; the faces (cli,
server, spark, connect) do not import each other, except that the CLI launches the others (`klog
serve`, `klog spark`, `klog connect`). Imports inside functions count too: a lazy import is still
a dependency, only a later one.

Method: parse every module under klog/ and list each `import klog.x` / `from klog.x import ...`
with the package it comes from and the one it names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

KLOG = Path(__file__).resolve().parent.parent / "klog"

# package -> layer; a higher layer may import a lower one. "klog" is klog/__init__.py, the public
# facade (`import klog; klog.open(...)`) over the client; "__main__" is `python -m klog`.
LAYERS = {
    "errors": 0,
    "store": 1, "security": 1, "protocol": 1,
    "meta": 2,
    "broker": 3,
    "client": 4, "klog": 4,
    "cli": 5, "server": 5, "spark": 5, "connect": 5, "registry": 5,
    "__main__": 6,
}
# imports across packages of one layer that are allowed: the facade names the client's classes, and
# the CLI starts the other faces
SIDEWAYS = {("klog", "client"), ("cli", "server"), ("cli", "spark"), ("cli", "connect"), ("cli", "registry")}


def package_of(module: str) -> str:
    """'klog.client.remote.wire' -> 'client'; 'klog' -> 'klog'; 'klog.errors' -> 'errors'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "klog"


def imports_of(path: Path) -> list[str]:
    """The klog modules `path` imports, anywhere in it (`from klog import x` names klog.x)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "klog":
            if node.module == "klog":
                found += [f"klog.{a.name}" for a in node.names]
            else:
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "klog"]
    return found


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def violations(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        source = package_of(module_name(path, root))
        for target_module in imports_of(path):
            target = package_of(target_module)
            if target == source or target == "__version__":
                continue
            if source not in LAYERS or target not in LAYERS:
                out.append(f"{path.relative_to(root.parent)}: {target_module} (package not in a layer: "
                           "add it to LAYERS here and to docs/architecture.md)")
            elif LAYERS[target] > LAYERS[source] or (LAYERS[target] == LAYERS[source]
                                                     and (source, target) not in SIDEWAYS):
                out.append(f"{path.relative_to(root.parent)}: imports {target_module} "
                           f"({source} is layer {LAYERS[source]}, {target} is layer {LAYERS[target]})")
    return out


@pytest.mark.slow
def test_every_import_points_down_the_layers():
    found = violations(KLOG)
    assert not found, "an import points up (or sideways) the layers; move the code down:\n" + "\n".join(found)


def test_every_package_is_in_a_layer():
    packages = {p.name for p in KLOG.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    packages |= {p.stem for p in KLOG.glob("*.py") if p.stem not in ("__init__",)}
    assert packages - set(LAYERS) - {"__version__"} == set()


def test_the_check_sees_an_upward_a_sideways_and_a_lazy_import(tmp_path):
    root = tmp_path / "klog"
    for package in ("store", "broker", "client", "server", "spark", "cli"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "store" / "log.py").write_text("from klog.broker.replication import ReplicaManager\n")
    (root / "server" / "fetch.py").write_text("def f():\n    from klog.spark import arrow\n")
    (root / "broker" / "dirs.py").write_text("import klog.client.store\n")
    (root / "cli" / "serve.py").write_text("from klog.server import Server\nfrom klog.store import log\n")
    (root / "client" / "store.py").write_text("from klog.broker import dirs\nfrom klog.client import consumer\n")
    found = violations(root)
    assert [line.split(":")[0] for line in found] == ["klog/broker/dirs.py", "klog/server/fetch.py",
                                                      "klog/store/log.py"]
