"""docs/architecture.md matches the tree: every package, module and folder it names exists, and every
package of klog/ is on it (a new package gets its line in the layers)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "architecture.md"
# named on the page before they land (each with the branch building it); none now
PLANNED: dict[str, str] = {}


def named_paths(text: str) -> set[str]:
    """Every `klog/...` or `tests/...` path on the page; a bare module name in a row that names
    its package (`replication.py` beside `klog/broker`) is read as that package's file."""
    paths = set(re.findall(r"\b((?:klog|tests)(?:/[A-Za-z0-9_]+)*(?:\.py|\.md)?)", text))
    for line in text.splitlines():
        packages = re.findall(r"`(klog/[a-z_]+)`", line)
        if len(packages) == 1:
            paths |= {f"{packages[0]}/{m}" for m in re.findall(r"`([a-z_]+\.py)`", line)}
    return {p for p in paths if p not in ("klog", "tests")}


def test_every_path_the_page_names_exists():
    missing = sorted(p for p in named_paths(PAGE.read_text()) if not (REPO / p).exists() and p not in PLANNED)
    assert not missing, "docs/architecture.md names what is not in the tree:\n" + "\n".join(missing)


def test_every_package_is_on_the_page():
    text = PAGE.read_text()
    packages = sorted(f"klog/{p.name}" for p in (REPO / "klog").iterdir() if (p / "__init__.py").exists())
    absent = [p for p in packages if f"`{p}`" not in text]
    assert not absent, "packages docs/architecture.md does not place in the layers: " + ", ".join(absent)


def test_the_check_reads_paths_and_modules_beside_their_package():
    text = "| `klog/broker` | replication (`replication.py`), `dirs.py` |\nsee klog/store/codec.py and tests/store\n"
    assert named_paths(text) == {"klog/broker", "klog/broker/replication.py", "klog/broker/dirs.py",
                                 "klog/store/codec.py", "tests/store"}



# the checks of the whole repository, which belong to no one package
ROOT_TESTS = {"test_architecture.py", "test_benchmarks.py", "test_docs_examples.py", "test_docs_fresh.py",
              "test_docs_walk.py", "test_layering.py", "test_readme.py", "test_replay_seed.py", "test_samples.py"}


def test_test_files_sit_in_the_folder_of_their_package():
    """tests/<package>/ mirrors klog/<package>/: a new test file goes beside the others of its feature."""
    stray = sorted(p.name for p in (REPO / "tests").glob("test_*.py") if p.name not in ROOT_TESTS)
    folders = sorted(p.name for p in (REPO / "tests").iterdir() if p.is_dir() and any(p.glob("test_*.py")))
    assert not stray, f"move these into a folder of tests/ ({', '.join(folders)}): {', '.join(stray)}"
    unmatched = [f for f in folders if not (REPO / "klog" / f).is_dir()]
    assert not unmatched, f"folders of tests/ that mirror no package of klog/: {unmatched}"


def test_no_merge_leftovers_in_the_tree():
    """A conflicted merge's backups (*.orig, *.rej, *_BACKUP_*) committed by mistake."""
    leftovers = sorted(str(p.relative_to(REPO)) for top in ("klog", "tests", "docs", "benchmarks")
                       for pattern in ("*.orig", "*.rej", "*_BACKUP_*", "*_BASE_*", "*_LOCAL_*", "*_REMOTE_*")
                       for p in (REPO / top).rglob(pattern))
    assert not leftovers, leftovers
