"""The benchmark harness keeps working: every case runs at tiny sizes, and a full run's table is kept.

Goal: `python benchmarks/run.py --smoke` (what CI runs) finishes with every case, figures asserted
nowhere; a full run rewrites only its own cases' rows of benchmarks/README.md.
Method: run the harness as a user does (a process), on all cases (slow) and on two in-process ones
(fast); call its table writer on a scratch README.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RUN = REPO / "benchmarks" / "run.py"


def load_run():  # noqa: ANN201 - benchmarks/run.py as a module
    spec = importlib.util.spec_from_file_location("bench_run", RUN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def smoke(*cases: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(RUN), "--smoke", *cases], capture_output=True, text=True,
                          timeout=900, cwd=REPO)


def test_every_case_is_listed_with_a_title() -> None:
    run = load_run()
    names = run.case_names()
    assert {"cli", "codec", "serve", "cluster", "growth"} <= set(names)
    for name in names:
        module = run.load_case(name)
        assert run.title(module), f"benchmarks/cases/{name}.py needs a docstring: its first line is the title"
        assert callable(getattr(module, "run", None)), f"benchmarks/cases/{name}.py needs run(bench)"


def test_benchmarks_are_cases_of_the_one_harness() -> None:
    """A new benchmark is a case in benchmarks/cases/ (see benchmarks/README.md, 'Adding a case'), not a
    script with its own timing: only the harness, its runner and the serve helper live beside them."""
    scripts = sorted(p.name for p in (REPO / "benchmarks").glob("*.py"))
    assert scripts == ["harness.py", "run.py", "serve_process.py"], (
        f"benchmarks/ holds {scripts}: make each benchmark a case in benchmarks/cases/ (benchmarks/README.md)")


@pytest.mark.slow
def test_smoke_runs_in_process_cases_and_writes_nothing() -> None:
    readme = (REPO / "benchmarks" / "README.md").read_bytes()
    done = smoke("codec", "validate_uniform")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "== codec:" in done.stdout and "klog encode_batch" in done.stdout
    assert (REPO / "benchmarks" / "README.md").read_bytes() == readme


def test_an_unknown_case_is_one_line_and_exit_2() -> None:
    done = smoke("no-such-case")
    assert done.returncode == 2
    assert done.stderr.startswith("benchmarks/run.py: no case no-such-case")


def test_a_full_run_replaces_only_its_own_rows(tmp_path: Path) -> None:
    run = load_run()
    from harness import Row

    readme = tmp_path / "README.md"
    readme.write_text(f"# Benchmarks\n\ntext\n\n{run.START}\n{run.HEADER}\n"
                      "| `codec` | old | 1 | | 2026-01-01, load 1.0-1.0 |\n"
                      "| `cli` | kept | 2 | | 2026-01-01, load 1.0-1.0 |\n"
                      f"{run.END}\n\nafter\n")
    run.write_results({"codec": ([Row("codec", "encode", "4.5 M records/s", "9x kafka-python")], "2026-11-27, load 2")},
                      readme)
    text = readme.read_text()
    assert "| `codec` | encode | 4.5 M records/s | 9x kafka-python | 2026-11-27, load 2 |" in text
    assert "| old |" not in text and "| `cli` | kept |" in text
    assert text.startswith("# Benchmarks\n\ntext\n") and text.endswith("\n\nafter\n")


def test_a_narrowed_run_replaces_only_the_rows_it_measured(tmp_path: Path) -> None:
    run = load_run()
    from harness import Row

    readme = tmp_path / "README.md"
    old = ["| `partitions` | keyed into 1,000 (median of 5) | 0.36 s | | 2026-01-01, load 1 |",
           "| `partitions` | keyed into 10,000 (median of 5) | 1.03 s | | 2026-01-01, load 1 |",
           "| `partitions` | serve into 1,000 | 0.45 s | | 2026-01-01, load 1 |"]
    readme.write_text("\n".join([run.START, run.HEADER, *old, run.END, ""]))
    rows = [Row("partitions", "keyed into 1,000 (median of 7)", "0.30 s"),
            Row("partitions", "serve_many into 1,000", "0.28 s")]
    run.write_results({"partitions": (rows, "2026-11-29, load 2")}, readme, narrowed=frozenset({"partitions"}))
    lines = [line for line in readme.read_text().splitlines() if line.startswith("| `partitions`")]
    assert lines == ["| `partitions` | keyed into 1,000 (median of 7) | 0.30 s |  | 2026-11-29, load 2 |",
                     old[1], old[2], "| `partitions` | serve_many into 1,000 | 0.28 s |  | 2026-11-29, load 2 |"]


# the cases in three runs of the harness, so two test workers share them (one run of every case was the
# suite's longest test, ~110 s); the longest cases are dealt out first, one to each run
SMOKE_SHARES = 3
SMOKE_LONGEST = ("spark", "serve", "serve_groups", "serve_scaling", "connect", "partitions")


@pytest.mark.slow
@pytest.mark.parametrize("share", range(SMOKE_SHARES))
def test_every_case_runs_in_smoke_mode(share: int) -> None:
    names = load_run().case_names()
    dealt = [n for n in SMOKE_LONGEST if n in names] + [n for n in names if n not in SMOKE_LONGEST]
    mine = dealt[share::SMOKE_SHARES]
    done = smoke(*mine)
    first_error = done.stderr.find("Traceback")
    assert done.returncode == 0, done.stderr[max(first_error, 0):][:6000]
    for name in mine:
        assert f"== {name}:" in done.stdout
