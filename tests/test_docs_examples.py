"""Every example in README.md and docs/*.md does what the page says it does.

Goal: a newcomer who copies a command, an option or a link from the docs gets what the page shows.
Method (fast: in-process checks, plus a few short examples run as a newcomer would):
- every `klog ...` command line in a shell block or an inline code span names commands and options
  the CLI has (the generated completion spec, which tests/test_docs_fresh.py keeps equal to the CLI);
  `a|b` in a command position means each of them, `--x/--y` each option; a group followed by an option
  (`klog transactions -b`) means an option of its subcommands;
- a `--long-option` named alone in prose is an option of some klog command (spans that quote another
  tool: kafka-*.sh, pip, rpk, kcat, are left alone);
- a link to a heading (`page.md#heading`, `#heading`) finds that heading (GitHub's anchors);
- `klog.Name` in prose is a name the klog package exports (`klog.errors.UsageError`, not `klog.UsageError`);
- compatibility.md's table of versions is what `klog serve` answers;
- a runnable block followed by `<!-- output -->` and a `text` block prints exactly that text on
  stdout, run alone against a fresh home and store (tests/test_readme.py's scratch shell).
tests/test_readme.py runs every runnable block of every page (slow lane) and checks it exits 0.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from klog.cli.argv import move_global_options
from tests.test_readme import DOCS, README, REPO, Block, blocks, scratch_env

PAGES = [README, *sorted(DOCS.glob("*.md"))]
SPEC = json.loads((REPO / "klog" / "cli" / "completion_spec.json").read_text(encoding="utf-8"))
OUTPUT_MARKER = "<!-- output -->"
OTHER_TOOLS = re.compile(r"^(kafka-|connect-|pip\b|python\b|rpk\b|kcat\b|man\b|cp\b)")
OTHER_OPTIONS = {"--packages"}  # spark-submit's
JAVA_NAMES = {"klog.DefaultSource"}  # a class of klog/spark/jars/klog-spark.jar, not a Python name
EXAMPLE_SECONDS = 60


def page_id(page: Path) -> str:
    return page.relative_to(REPO).as_posix()


def prose(text: str) -> str:
    """The page without its fenced blocks (their lines kept blank, so line numbers hold)."""
    return re.sub(r"^ {0,3}```.*?^ {0,3}```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.M)


def inline_spans(text: str) -> list[tuple[int, str]]:
    return [(n, span) for n, line in enumerate(prose(text).splitlines(), 1)
            for span in re.findall(r"`([^`]+)`", line)]


# -- commands and options ---------------------------------------------------------------------------
def all_options() -> set[str]:
    found = set(SPEC["options"])

    def walk(node: dict) -> None:
        for sub in node.get("commands", {}).values():
            found.update(sub.get("options", {}))
            walk(sub)

    walk(SPEC)
    return found


def command_lines(page: Path) -> list[tuple[str, str]]:
    """(where, `klog ...` text) of the page's shell blocks and inline code spans; a span without
    `klog` (`topics create T --if-not-exists`) gets it, and `?` after where it came from."""
    found = []
    for block in blocks(page):
        if block.lang != "sh":
            continue
        for k, line in enumerate(block.code.splitlines()):
            line = re.sub(r"(^|\s)#.*$", "", line)  # a comment
            for piece in re.split(r"\|\s|&&|;|\$\(", line):  # each command of a pipeline or a list
                m = re.match(r"\s*(?:\w+=\S+\s+)*(klog\s.*)$", piece)
                if m:
                    found.append((f"{page.name}:{block.line + 1 + k}", m.group(1)))
    for n, span in inline_spans(page.read_text(encoding="utf-8")):
        words = span.split()
        if len(words) > 1 and (words[0] == "klog" or words[0] in SPEC["commands"]):
            found.append((f"{page.name}:{n}", span) if words[0] == "klog" else (f"{page.name}:{n}?", f"klog {span}"))
    return found


def tokens(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:  # an unclosed quote in a shortened span
        return text.split()


def option_problems(where: str, text: str) -> list[str]:
    args = move_global_options(tokens(text)[1:])
    return _walk(where, text, [SPEC], args, "klog")


def _walk(where: str, text: str, nodes: list[dict], args: list[str], path: str) -> list[str]:
    """Check `args` against the command `nodes` (several when the page wrote `a|b`)."""
    if args and not args[0].startswith("-") and any(n.get("commands") for n in nodes):
        names = args[0].split("|")
        subs = [n["commands"][name] for n in nodes for name in names if name in n.get("commands", {})]
        if len(subs) != len(names) * len(nodes):
            if re.fullmatch(r"[a-z][a-z-]*(\|[a-z][a-z-]*)*", args[0]) and not where.endswith("?"):
                return [f"{where}: `{path}` has no command {args[0]!r}  [{text}]"]
            return []  # a placeholder (`<command>`, `...`)
        return _walk(where, text, subs, args[1:], f"{path} {args[0]}")
    options = []
    for node in nodes:
        known = {**SPEC["options"], **node.get("options", {})}
        for sub in node.get("commands", {}).values():  # `klog transactions -b`: its subcommands' option
            known.update(sub.get("options", {}))
        options.append(known)
    problems = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not re.match(r"--?[A-Za-z]", arg):
            continue  # a value, an argument, a placeholder such as -N
        names = arg.split("=")[0].split("/")
        for name in names:
            attached = len(name) > 2 and name[1] != "-"  # -K: is -K with its value
            if not all(name in known or (attached and known.get(name[:2])) for known in options):
                problems.append(f"{where}: `{path}` has no option {name}  [{text}]")
        if "=" not in arg and any(known.get(names[-1]) for known in options):
            i += 1  # its value
    return problems


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_commands_and_options_exist(page: Path) -> None:
    problems = [p for where, text in command_lines(page) for p in option_problems(where, text)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_options_named_in_prose_exist(page: Path) -> None:
    known = all_options()
    missing = []
    for n, span in inline_spans(page.read_text(encoding="utf-8")):
        if OTHER_TOOLS.match(span):
            continue
        missing += [f"{page.name}:{n}: {o} [{span}]" for o in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", span)
                    if o not in known | OTHER_OPTIONS]
    assert not missing, "no klog command has " + "\n".join(missing)


def test_the_checks_find_what_they_look_for() -> None:
    assert option_problems("x", "klog consume t --isolation-level read_committed")
    assert option_problems("x", "klog topics create|nosuch t")
    assert not option_problems("x", "klog --data-dir /tmp/o transactions list -b h:1 --json")
    assert not option_problems("x", "klog topics create|alter T -c k=v")
    assert not option_problems("x", "klog consume t -K: -o -2 --grep/--grep-key X")
    assert option_problems("x", "klog produce t -q")


# -- links and names ------------------------------------------------------------------------------------
def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose(page.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_links_to_headings_resolve(page: Path) -> None:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target) or "#" not in target:
            continue
        file, _, anchor = target.partition("#")
        linked = (page.parent / file).resolve() if file else page
        if linked.suffix == ".md" and linked.exists() and anchor not in anchors(linked):
            broken.append(target)
    assert not broken, f"{page.name} links to headings that do not exist: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_names_in_the_klog_package_exist(page: Path) -> None:
    import klog

    text = page.read_text(encoding="utf-8")
    names = set(re.findall(r"\bklog\.([A-Z]\w*|[a-z_]+(?=\())", text))  # klog.Store, klog.open(
    exported = set(vars(klog)) | set(klog.__all__)  # (hasattr would import each lazily loaded module)
    missing = sorted(f"klog.{n}" for n in names if n not in exported and f"klog.{n}" not in JAVA_NAMES)
    assert not missing, f"{page.name} names {missing}, which the klog package does not have"


def test_the_versions_table_is_what_the_server_answers() -> None:
    from klog.server.dispatch import load_handlers

    text = (DOCS / "compatibility.md").read_text(encoding="utf-8")
    shown = {int(key): (int(low), int(high))
             for key, low, high in re.findall(r"^\| \w+ \((\d+)\) \| v(\d+)-v(\d+) \|", text, flags=re.M)}
    served = {key: (h.min_version, h.max_version) for key, h in load_handlers().items()}
    assert shown == served


# -- shown output -------------------------------------------------------------------------------------
def shown_outputs() -> list[tuple[Block, str]]:
    """(runnable block, the text the page shows it prints) for each `<!-- output -->` text block."""
    pairs = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        found = blocks(page)
        for before, block in zip(found, found[1:], strict=False):
            if block.lang == "text" and lines[block.line - 2].strip() == OUTPUT_MARKER:
                assert before.lang in ("sh", "python") and before.not_run is None, \
                    f"{page.name}:{block.line}: {OUTPUT_MARKER} follows a block that is not run"
                pairs.append((before, block.code))
    return pairs


@pytest.mark.parametrize("block, expected", [pytest.param(block, text, id=f"{block.page.name}:{block.line}")
                                             for block, text in shown_outputs()])
@pytest.mark.slow
def test_an_example_prints_what_the_page_shows(block: Block, expected: str, tmp_path: Path) -> None:
    env, work = scratch_env(tmp_path)
    code = block.code.replace("/tmp/", f"{tmp_path}/")
    argv = (["bash", "-e", "-o", "pipefail", "-c", code] if block.lang == "sh" else [sys.executable, "-c", code])
    done = subprocess.run(argv, cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=EXAMPLE_SECONDS)
    where = f"{block.page.name}:{block.line}"
    assert done.returncode == 0, f"{where} exits {done.returncode}\n{done.stderr[-2000:]}"
    assert done.stdout == expected, f"{where} prints\n{done.stdout}\nnot what the page shows\n{expected}"
