"""Run klog's benchmark cases and write their figures into benchmarks/README.md.

    python benchmarks/run.py                 # every case at full size (long: tens of minutes)
    python benchmarks/run.py cli codec       # some cases
    python benchmarks/run.py --smoke         # every case at tiny sizes, one round, nothing written
    python benchmarks/run.py --list          # the cases and what they measure

Each case (benchmarks/cases/<name>.py) measures klog beside a peer in the same run, alternating
them round by round, and reports medians. The load average is recorded before and after each case,
since the figures move with it. A full run replaces those cases' rows in the results table of
benchmarks/README.md (other cases' rows stay); --smoke checks that every case still runs and
asserts no figure.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES = HERE / "cases"
README = HERE / "README.md"
START, END = "<!-- results:start -->", "<!-- results:end -->"
HEADER = "| case | what | figure | beside (same run) | when, load |\n| --- | --- | --- | --- | --- |"

sys.path[:0] = [str(HERE), str(HERE.parent)]  # `from harness import ...`, `import klog` from this checkout
from harness import Bench, Row  # noqa: E402


def case_names() -> list[str]:
    return sorted(p.stem for p in CASES.glob("*.py") if not p.stem.startswith("_"))


def load_case(name: str):  # noqa: ANN201 - the case module
    spec = importlib.util.spec_from_file_location(f"bench_case_{name}", CASES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def title(module) -> str:  # noqa: ANN001
    return (module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else ""


def run_case(name: str, smoke: bool, rounds: int | None) -> tuple[list[Row], str, bool, bool]:
    """(rows, 'when, load' note, ok, narrowed: see Bench.narrowed)."""
    module = load_case(name)
    print(f"== {name}: {title(module)}", flush=True)
    load_before = os.getloadavg()[0]
    tmp = tempfile.mkdtemp(prefix=f"klog-bench-{name}-")
    bench = Bench(case=name, smoke=smoke, tmp=tmp, rounds_override=rounds)
    started = time.monotonic()
    ok = True
    try:
        module.run(bench)
    except Exception:  # one case failing must not lose the others' figures
        traceback.print_exc()
        ok = False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load_after = os.getloadavg()[0]
    when = f"{datetime.date.today().isoformat()}, load {load_before:.1f}-{load_after:.1f}"
    print(f"   ({time.monotonic() - started:.1f} s, load {load_before:.1f} -> {load_after:.1f})", flush=True)
    return bench.rows, when, ok, bench.narrowed


def table_rows(text: str) -> dict[str, list[str]]:
    """The results table's lines now in the README, by case."""
    if START not in text:
        return {}
    body = text.split(START, 1)[1].split(END, 1)[0]
    rows: dict[str, list[str]] = {}
    for line in body.splitlines():
        if line.startswith("| ") and not line.startswith(("| case ", "| ---")):
            rows.setdefault(line.split("|")[1].strip(" `"), []).append(line)
    return rows


def _sub_case(line: str) -> str:
    """A results line's sub-case: its `what` column up to a parenthesis (what was measured, not how often)."""
    return line.split("|")[2].split(" (")[0].strip() if line.count("|") > 2 else ""


def _merged(old: list[str], new: list[str]) -> list[str]:
    """`old` with each sub-case `new` covers replaced by its new lines, where its first old line was
    (a sub-case new to the table goes last)."""
    fresh: dict[str, list[str]] = {}
    for line in new:
        fresh.setdefault(_sub_case(line), []).append(line)
    out: list[str] = []
    for line in old:
        sub = _sub_case(line)
        if sub in fresh:
            out += fresh.pop(sub)
        elif not any(_sub_case(o) == sub for o in new):
            out.append(line)
    return out + [line for lines in fresh.values() for line in lines]


def write_results(results: dict[str, tuple[list[Row], str]], readme: Path = README,
                  narrowed: frozenset[str] = frozenset()) -> None:
    """`narrowed`: cases whose run covered some of their sub-cases (their other rows are kept)."""
    text = readme.read_text(encoding="utf-8")
    rows = table_rows(text)
    for name, (case_rows, when) in results.items():
        cell = lambda s: s.replace("|", "\\|")  # noqa: E731 - a figure may hold a pipe
        new = [f"| `{name}` | {cell(r.what)} | {cell(r.figure)} | {cell(r.peer)} | {when} |" for r in case_rows]
        if name in narrowed:
            new = _merged(rows.get(name, []), new)
        rows[name] = new
    lines = [line for name in sorted(rows) for line in rows[name]]
    block = f"{START}\n{HEADER}\n" + "\n".join(lines) + f"\n{END}"
    if START in text:
        before, rest = text.split(START, 1)
        text = before + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    readme.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/run.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", help="case names (default: all)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one round, nothing written")
    parser.add_argument("--list", action="store_true", help="list the cases")
    parser.add_argument("--rounds", type=int, help="alternated rounds per comparison (default: the case's)")
    parser.add_argument("--no-write", action="store_true", help="print the figures, leave benchmarks/README.md")
    args = parser.parse_args(argv)
    names = case_names()
    if args.list:
        for name in names:
            print(f"{name:20s} {title(load_case(name))}")
        return 0
    unknown = sorted(set(args.cases) - set(names))
    if unknown:
        print(f"benchmarks/run.py: no case {', '.join(unknown)} (there are: {', '.join(names)})", file=sys.stderr)
        return 2
    results: dict[str, tuple[list[Row], str]] = {}
    narrowed: set[str] = set()
    failed = []
    for name in args.cases or names:
        rows, when, ok, partial = run_case(name, args.smoke, args.rounds)
        if ok:
            results[name] = (rows, when)
            if partial:
                narrowed.add(name)
        else:
            failed.append(name)
    if not args.smoke and not args.no_write and results:
        write_results(results, narrowed=frozenset(narrowed))
        print(f"wrote {len(results)} case(s) into {README.relative_to(HERE.parent)}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
