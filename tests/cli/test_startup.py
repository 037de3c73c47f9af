"""Everyday commands stay light: `klog --help`, `klog consume` and `klog produce` never import the
Spark, pandas or Arrow stacks (seconds of start-up each), whatever is installed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

HEAVY = ("pyspark", "pandas", "pyarrow", "py4j", "numpy")


PROBE = """
import atexit, runpy, sys
atexit.register(lambda: sys.stderr.write("MODULES " + " ".join(sorted(sys.modules)) + "\\n"))
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
    assert "klog.cli.app" in modules  # the measurement works
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY or m.startswith("klog.spark"))
    assert heavy == [], f"klog {' '.join(args)} imported {heavy[:5]}"
