"""The README and docs/ stay short, linked and runnable.

Goal: a newcomer reads a README under 20 KB that links every page of docs/, and every command shown in
README.md or docs/*.md works as written.
Method: every fenced block tagged `sh` or `python` is run, the blocks of one page in order against one
fresh home directory (HOME is a temporary folder, so `~/...` and the default store `~/.local/share/klog`
are the test's own; `/tmp/` in a command means a temporary folder too). A block the reader cannot run
on a bare machine (it needs a Kafka cluster, Spark and Java, or a fixed port) carries the marker
`<!-- not-run: why -->` on the line before its fence, and is only checked to have a reason. Commands
that follow (`-f`, `--follow`) are stopped after FOLLOW_SECONDS, which counts as success; any other
non-zero exit fails the page, naming the block's line.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"
README_BYTES_MAX = 20_000
RUNNABLE = {"sh", "python"}
# fences that show something other than a command (a file tree, a config file, output)
SHOWN = {"text", "ini", "properties", "json", "csv", "toml"}
NOT_RUN = re.compile(r"<!--\s*not-run:\s*(.*?)\s*-->")
FENCE = re.compile(r"^( {0,3})```(\S*)\s*$")  # a fence inside a list item is indented
FOLLOW_SECONDS = 2
BLOCK_SECONDS = 180


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    not_run: str | None  # the marker's reason


def blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, indent, lang = i, len(m.group(1)), m.group(2)
        end = next((j for j in range(i + 1, len(lines)) if lines[j].lstrip().startswith("```")), None)
        assert end is not None, f"{page.name}:{start + 1}: fence never closed"
        marker = NOT_RUN.search(lines[start - 1]) if start else None
        code = "\n".join(line[indent:] if line[:indent].isspace() else line for line in lines[start + 1:end])
        found.append(Block(page, start + 1, lang, code + "\n", marker.group(1) if marker else None))
        i = end + 1
    return found


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def test_readme_is_short() -> None:
    size = len(README.read_bytes())
    assert size <= README_BYTES_MAX, f"README.md is {size} bytes: move detail into docs/ (limit {README_BYTES_MAX})"


def test_every_docs_page_is_linked_from_the_readme() -> None:
    text = README.read_text(encoding="utf-8")
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if f"(docs/{p.name}" not in text]
    assert not missing, f"README.md links no {missing}"


def test_the_cheat_sheet_has_a_row_for_every_kcat_flag() -> None:
    """Each flag `kcat -h` lists appears in the first column of the README's kcat table."""
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.skip("kcat is not installed")
    done = subprocess.run([kcat, "-h"], capture_output=True, text=True)
    usage = done.stdout + done.stderr
    flags = set(re.findall(r"^  (-[A-Za-z])\b", usage, flags=re.M))
    if re.search(r"^  -C \| -P \| -L \| -Q", usage, flags=re.M):
        flags |= {"-C", "-P", "-L", "-Q"}
    text = README.read_text(encoding="utf-8")
    table = text[text.index("| kcat | klog |"):]
    table = table[:table.index("\n\n")]
    first_column = " ".join(line.split("|")[1] for line in table.splitlines()[2:])
    missing = sorted(f for f in flags if not re.search(rf"(?<![\w-]){f}(?!\w)", first_column))
    assert len(flags) > 20, usage
    assert not missing, f"the README's kcat table has no row for {missing}"


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_links_point_at_files_that_exist(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        if not path.exists():
            broken.append(target)
    assert not broken, f"{page.name} links to missing {broken}"


def resolves(dotted: str) -> bool:
    """klog.store.reader.PartitionReader: import the longest module prefix, then look the rest up."""
    parts = dotted.split(".")
    for n in range(len(parts), 1, -1):
        try:
            obj = importlib.import_module(".".join(parts[:n]))
        except ImportError:
            continue
        for attr in parts[n:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_named_files_and_modules_exist(page: Path) -> None:
    """A module moved (klog/client -> klog/broker) or a test renamed leaves no stale name behind."""
    text = page.read_text(encoding="utf-8")
    files = set(re.findall(r"\b((?:klog|tests|benchmarks|samples|completions|man)/[\w./-]+\.\w+)", text))
    missing = sorted(f for f in files if not (REPO / f).exists())
    for name in sorted(set(re.findall(r"\bklog(?:\.[a-z_]+){2,}(?:\.[A-Z]\w*)?", text))):
        if not resolves(name):
            missing.append(name)
    assert not missing, f"{page.name} names {missing}, which do not exist"


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_blocks_are_tagged(page: Path) -> None:
    for block in blocks(page):
        where = f"{page.name}:{block.line}"
        assert block.lang in RUNNABLE | SHOWN, f"{where}: tag the fence with one of {sorted(RUNNABLE | SHOWN)}"
        if block.not_run is not None:
            assert block.lang in RUNNABLE and block.not_run, f"{where}: not-run needs a reason, on a command"


def klog_wrapper(bin_dir: Path) -> None:
    """`klog` on PATH is this checkout; a following command runs for FOLLOW_SECONDS and counts as done."""
    bin_dir.mkdir()
    script = bin_dir / "klog"
    script.write_text(f"""#!/usr/bin/env bash
case " $* " in
  *" -f "*|*" --follow "*)
    timeout -s INT {FOLLOW_SECONDS} {sys.executable} -m klog "$@"; rc=$?
    [ $rc = 124 ] || [ $rc = 130 ] && exit 0; exit $rc ;;
esac
exec {sys.executable} -m klog "$@"
""")
    script.chmod(0o755)


def scratch_env(tmp: Path) -> tuple[dict[str, str], Path]:
    """(environment, working folder) of a newcomer's shell: HOME, the default store and the working
    folder all under `tmp`, `klog` on PATH running this checkout, samples/ as in a clone."""
    home, work = tmp / "home", tmp / "work"
    home.mkdir(exist_ok=True)
    work.mkdir(exist_ok=True)
    if not (work / "samples").exists():
        (work / "samples").symlink_to(REPO / "samples")
    if not (tmp / "bin").exists():
        klog_wrapper(tmp / "bin")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KLOG_")}
    env.update(HOME=str(home), PATH=f"{tmp / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}", NO_COLOR="1",
               PYTHONPATH=str(REPO), COLUMNS="100")
    return env, work


def run_page(page: Path, tmp: Path) -> list[str]:
    """Run the page's runnable blocks in order; the outputs, block by block."""
    env, work = scratch_env(tmp)
    outputs = []
    for block in blocks(page):
        if block.lang not in RUNNABLE or block.not_run is not None:
            continue
        code = block.code.replace("/tmp/", f"{tmp}/")
        if block.lang == "sh":
            argv = ["bash", "-e", "-o", "pipefail", "-c", code]
        else:
            argv = [sys.executable, "-c", code]
        done = subprocess.run(argv, cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=BLOCK_SECONDS)
        assert done.returncode == 0, (f"{page.relative_to(REPO)}:{block.line}: the {block.lang} block exits "
                                      f"{done.returncode}\n--- stdout\n{done.stdout[-3000:]}\n"
                                      f"--- stderr\n{done.stderr[-3000:]}")
        outputs.append(done.stdout)
    return outputs


@pytest.mark.slow
def test_readme_commands_run(tmp_path: Path) -> None:
    out = "".join(run_page(README, tmp_path))
    assert "RecordMetadata(topic='orders'" in out  # the Python example printed where its record landed


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_docs_commands_run(page: Path, tmp_path: Path) -> None:
    run_page(page, tmp_path)
