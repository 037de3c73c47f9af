"""What a newcomer walking README.md, docs/ and the man pages found untrue, kept checked.

Goal: the exit codes a man page promises are the ones the command gives; a command that only shows or
removes something leaves no new store behind a mistyped --data-dir (docs/viewer.md); the layers of
docs/architecture.md hold for modules imported by name too (the lazy `_EXPORTS` tables), not only for
`import` statements (tests/test_layering.py's check).
Method: run the commands in-process against a fresh store (or a path with none), read the generated man
page's EXIT STATUS section, and parse every module for string constants that name a klog module.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.test_layering import KLOG, LAYERS, SIDEWAYS, module_name, package_of

REPO = KLOG.parent


def exit_status(page: str) -> dict[str, str]:
    """The man page's EXIT STATUS section: code -> what it says."""
    text = (REPO / "man" / page).read_text(encoding="utf-8")
    section = text[text.index(".SH EXIT STATUS"):]
    section = section[:section.index("\n.SH ", 1)]
    return dict(re.findall(r"^\\fB(\d+)\\fP\n(.+)$", section, flags=re.M))


UNKNOWN_TOPIC = [
    ("klog-consume.1", ["consume", "nosuch"]),
    ("klog-offsets.1", ["offsets", "nosuch"]),
    ("klog-topics-describe.1", ["topics", "describe", "nosuch"]),
    ("klog-topics-delete.1", ["topics", "delete", "nosuch", "--yes"]),
    ("klog-verify.1", ["verify", "nosuch"]),
    ("klog-groups-reset-offsets.1", ["groups", "reset-offsets", "g", "--topic", "nosuch", "--to-earliest"]),
]


@pytest.mark.parametrize(("page", "args"), UNKNOWN_TOPIC, ids=[p for p, _ in UNKNOWN_TOPIC])
def test_an_unknown_topic_exits_as_the_man_page_says(cli, page: str, args: list[str]) -> None:
    assert cli("topics", "create", "seed").exit_code == 0
    result = cli(*args)
    assert "unknown topic 'nosuch'" in result.stderr
    said = exit_status(page)
    assert str(result.exit_code) in said, (page, result.exit_code)
    assert re.search(r"unknown topic|topic .*does not exist", said[str(result.exit_code)]), (
        f"{page} says exit {result.exit_code} is {said[str(result.exit_code)]!r}, not an unknown topic")
    assert "missing topic" not in said.get("2", ""), f"{page}: exit 2 is not a topic that does not exist"


def test_no_store_exits_as_the_man_pages_say(cli, tmp_path: Path) -> None:
    result = cli("topics", "list", "--data-dir", str(tmp_path / "typo"))
    assert result.exit_code == 1 and "no klog store at" in result.stderr
    for page in sorted((REPO / "man").glob("klog-*.1")):
        said = exit_status(page.name)
        assert "store" not in said.get("2", ""), f"{page.name}: no store is exit 1, not {said['2']!r}"
    assert "no store" in exit_status("klog-topics-list.1")["1"]


@pytest.mark.parametrize("args", [
    ["acls", "settings"],                                          # shows the settings
    ["quotas", "remove", "--user", "alice", "producer_byte_rate"],  # nothing to remove
], ids=lambda a: " ".join(a[:2]))
def test_showing_or_removing_makes_no_store(cli, tmp_path: Path, args: list[str]) -> None:
    typo = tmp_path / "typo"
    result = cli(*args, "--data-dir", str(typo))
    assert (result.exit_code, result.stderr.strip()) == (1, f"klog: error: no klog store at {typo}")
    assert not typo.exists()


def test_acls_settings_shows_without_writing(cli) -> None:
    assert cli("acls", "settings", "--super-user", "User:admin").exit_code == 0
    shown = cli("acls", "settings", "--json")
    assert (shown.exit_code, shown.out.strip()) == (
        0, '{"super.users": ["User:admin"], "allow.everyone.if.no.acl.found": "auto"}')


# -- the layers, for modules named in strings ---------------------------------------------------------
# imports by name the layers allow besides the sideways ones: the facade's klog.Server and klog.serve,
# which docs/architecture.md names
NAMED_EXCEPTIONS = {("klog", "klog.server.server")}


def named_modules(path: Path) -> list[str]:
    """String constants in `path` that name an existing klog module (`"klog.client.store"`,
    `"klog.connect.file:FileSource"`): the targets of lazy imports by name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            m = re.fullmatch(r"(klog(?:\.\w+)+)(?::\w+)?", node.value)
            if m:
                parts = m.group(1).split(".")
                target = REPO.joinpath(*parts)
                if target.with_suffix(".py").is_file() or (target / "__init__.py").is_file():
                    found.append(m.group(1))
    return found


@pytest.mark.slow
def test_modules_imported_by_name_point_down_the_layers() -> None:
    bad = []
    for path in sorted(KLOG.rglob("*.py")):
        source = package_of(module_name(path, KLOG))
        for target_module in named_modules(path):
            target = package_of(target_module)
            if target == source or (source, target_module) in NAMED_EXCEPTIONS:
                continue
            if LAYERS[target] > LAYERS[source] or (LAYERS[target] == LAYERS[source]
                                                   and (source, target) not in SIDEWAYS):
                bad.append(f"{path.relative_to(REPO)}: names {target_module}")
    assert not bad, "a module imported by name sits above its importer's layer:\n" + "\n".join(bad)
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert "`klog.Server`" in text and "`klog.serve`" in text, "docs/architecture.md names the facade's exception"
