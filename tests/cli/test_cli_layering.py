"""The CLI is parsing and formatting over the library (issue 18, sqlite-utils' model): it reads no
private attribute of a library object and imports no private name of the library.

Method: parse every klog/cli module and list `x._name` accesses (other than on self/cls) and
`from klog.<not cli> import _name`; the few allowed are the CLI's own markers on its command wrappers
and Typer hooks it patches, each named below with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

CLI = Path(__file__).resolve().parents[2] / "klog" / "cli"

ALLOWED = {
    ("app.py", "command._klog_cluster"),  # the CLI's marker on its own wrapped commands
    ("app.py", "command._klog_guarded"),  # the same, for the broken-pipe guard
    ("placeholders.py", "TyperArgument._usage_display_name"),  # Typer's hook the CLI replaces
    ("placeholders.py", "TyperOption._klog_placeholders"),  # the CLI's marker that it did
}


def private_accesses(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = ast.unparse(node.value)
            if owner not in ("self", "cls"):
                found.append(f"{owner}.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("klog."):
            if not (node.module or "").startswith("klog.cli."):
                found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")
                          and not a.name.startswith("__")]
    return found


def test_cli_reads_no_private_attribute_of_the_library():
    found = [(p.name, access) for p in sorted(CLI.glob("*.py")) for access in private_accesses(p)]
    unexpected = [f"klog/cli/{name}: {access}" for name, access in found if (name, access) not in ALLOWED]
    assert not unexpected, "the CLI reaches into the library; add a public method/property:\n" + "\n".join(unexpected)


def test_the_check_sees_an_access(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("from klog.client.store import _log_end\n\ndef f(store):\n    return store._partitions\n")
    assert sorted(private_accesses(sample)) == ["klog.client.store._log_end", "store._partitions"]


def test_cli_leaves_the_metadata_tables_to_the_library():
    """Users, ACLs, quotas, groups: Store methods and properties, not LMDB tables opened by a command."""
    found = [f"klog/cli/{p.name}: {ast.unparse(node)}" for p in sorted(CLI.glob("*.py"))
             for node in ast.walk(ast.parse(p.read_text()))
             if isinstance(node, ast.Attribute) and node.attr == "meta" and ast.unparse(node.value) == "store"]
    assert not found, "\n".join(found)
