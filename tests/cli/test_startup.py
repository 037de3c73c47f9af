"""Everyday commands stay light: `klog --help`, `klog consume` and `klog produce` never import the
Spark, pandas or Arrow stacks (seconds of start-up each), whatever is installed; and the hot commands
(`klog consume T -n 1`, `klog produce T` in a shell loop) import neither Typer's layers (pydantic,
rich, its click) nor anything else they do not use. Time is not asserted here (see the report of
issue 25 for the figures): the imports are what makes it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

HEAVY = ("pyspark", "pandas", "pyarrow", "py4j", "numpy")


PROBE = """
import atexit, runpy, sys
# (+ a mark when klog's compiled record reader was loaded: klog.store.bare_import takes its modules out)
reader = lambda: getattr(sys.modules.get("klog.store.fastrecords"), "_reader", None)
atexit.register(lambda: sys.stderr.write("MODULES " + " ".join(sorted(sys.modules))
                                         + (" <compiled-reader>" if reader() else "") + "\\n"))
sys.argv = ["klog", *sys.argv[1:]]
runpy.run_module("klog", run_name="__main__", alter_sys=True)
"""


def imported_modules(args: list[str], data_dir: str, input: bytes = b"") -> tuple[int, set[str]]:
    """Run `python -m klog ARGS`; its exit code and the modules loaded when it exits."""
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], input=input, capture_output=True, env=env,
                          timeout=120)
    lines = [x for x in proc.stderr.decode("utf-8", "replace").splitlines() if x.startswith("MODULES ")]
    assert len(lines) == 1, proc.stderr
    return proc.returncode, set(lines[0].split()[1:])


@pytest.mark.parametrize("args", [
    ["--help"],
    ["produce", "light"],
    ["consume", "light"],
    ["consume", "light", "--json"],
    ["consume", "--help"],
    ["topics", "list"],
])
def test_no_heavy_imports(data_dir, args):
    code, _ = imported_modules(["produce", "light"], data_dir, input=b"a\nb\n")
    assert code == 0
    code, modules = imported_modules(args, data_dir, input=b"c\n")
    assert code == 0
    assert "klog.cli.session" in modules  # the measurement works
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY or m.startswith("klog.spark"))
    assert heavy == [], f"klog {' '.join(args)} imported {heavy[:5]}"


# What a hot command never needs: Typer and what it brings, the cluster client, and the standard
# library modules that a package's version lookup, a logger, a thread pool or a date would pull in;
# nor dataclasses (it imports inspect, ast and tokenize, and each dataclass compiles its methods:
# the store's record classes are klog.store.plain's), uuid (only a topic's creation and a log
# directory's first meta.properties make one) or random (a topic of one partition needs no choice).
NOT_HOT = ("typer", "pydantic", "pydantic_core", "rich", "click", "annotated_types", "confluent_kafka",
           "klog.cli.app", "klog.client.remote", "importlib.metadata", "email", "argparse", "zipfile", "logging",
           "concurrent", "hashlib", "shutil", "datetime", "dataclasses", "inspect", "ast", "tokenize", "uuid",
           "random")


@pytest.mark.parametrize("args", [
    ["consume", "light", "-n", "1"],
    ["consume", "light", "-c", "1", "-e", "-q", "-K", ":"],
    ["--data-dir", "{data_dir}", "consume", "light"],
    ["produce", "light"],
    ["produce", "light", "-k", "key", "-H", "a=b"],
])
def test_hot_commands_import_only_what_they_use(data_dir, args):
    code, _ = imported_modules(["produce", "light"], data_dir, input=b"a\nb\n")
    assert code == 0
    args = [a.format(data_dir=data_dir) for a in args]
    code, modules = imported_modules(args, data_dir, input=b"c\n")
    assert code == 0
    assert "klog.cli.hot" in modules and "klog.store.partition" in modules  # the measurement works
    unused = sorted(m for m in modules if m in NOT_HOT or m.split(".")[0] in NOT_HOT
                    or any(m.startswith(n + ".") for n in NOT_HOT))
    assert unused == [], f"klog {' '.join(args)} imported {unused[:8]}"


def test_a_hot_command_typer_must_parse_still_works(data_dir):
    code, modules = imported_modules(["consume", "--help"], data_dir)
    assert code == 0 and "typer" in modules  # help is Typer's own


# A string compiled at run time (typing turns a NamedTuple's string annotation or a TypeVar's bound
# by name into a ForwardRef, which compiles it): the process's first compile() costs ~2 ms.
COMPILE_PROBE = """
import atexit, builtins, runpy, sys
compiled = []
_compile = builtins.compile
def compile(source, filename, mode, *args, **kwargs):
    if mode == "eval":
        compiled.append(str(source)[:40])
    return _compile(source, filename, mode, *args, **kwargs)
builtins.compile = compile
atexit.register(lambda: sys.stderr.write("COMPILED " + repr(compiled) + "\\n"))
sys.argv = ["klog", *sys.argv[1:]]
runpy.run_module("klog", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("args", [["consume", "light", "-n", "1"], ["produce", "light"]])
def test_hot_commands_compile_no_annotation(data_dir, args):
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    runs = [subprocess.run([sys.executable, "-c", COMPILE_PROBE, *a], input=b"c\n", capture_output=True, env=env,
                           timeout=120) for a in (["produce", "light"], args)]
    assert [r.returncode for r in runs] == [0, 0], runs[-1].stderr
    lines = [x for x in runs[-1].stderr.decode("utf-8", "replace").splitlines() if x.startswith("COMPILED ")]
    assert lines == ["COMPILED []"], f"klog {' '.join(args)} compiled at run time: {lines}"
