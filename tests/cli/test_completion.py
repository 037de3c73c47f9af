"""Shell completion as a user gets it: the real scripts of completions/ run by bash (and zsh and fish when
installed) against a `klog` on PATH, completing topic and group names from the store, fast."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

import klog
from tests.conftest import REPO

COMPLETIONS = os.path.join(REPO, "completions")


@pytest.fixture
def shell_env(tmp_path, data_dir):
    """PATH with a `klog` that runs this checkout; a store with topics and a group."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "klog"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m klog "$@"\n')
    exe.chmod(0o755)
    with klog.open(data_dir) as s:
        for name in ("orders", "order-events", "payments"):
            s.create_topic(name)
        with s.producer() as p:
            p.send("orders", b"x")
    subprocess.run([sys.executable, "-m", "klog", "consume", "orders", "-G", "billing"], capture_output=True,
                   env={**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}, check=True, timeout=60)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": REPO, "KLOG_DATA_DIR": data_dir}


def bash_complete(env: dict[str, str], line: str) -> list[str]:
    words = line.split(" ")
    script = (f"source {COMPLETIONS}/klog.bash\n"
              f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
              "_klog_completion klog\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n")
    r = subprocess.run(["bash", "--norc", "-c", script], capture_output=True, env=env, timeout=30, text=True)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    return [w for w in r.stdout.splitlines() if w]


def test_bash_completes_topics_groups_commands_and_values(shell_env):
    assert bash_complete(shell_env, "klog consume ord") == ["order-events", "orders"]
    assert bash_complete(shell_env, "klog consume orders -G ") == ["billing"]
    assert bash_complete(shell_env, "klog groups describe b") == ["billing"]
    assert bash_complete(shell_env, "klog topics describe p") == ["payments"]
    assert "describe" in bash_complete(shell_env, "klog topics ")
    assert bash_complete(shell_env, "klog produce orders --input ") == ["lines", "json", "raw"]
    assert bash_complete(shell_env, "klog consume orders -o ") == ["beginning", "end"]
    assert bash_complete(shell_env, "klog spark export orders --to p") == ["parquet"]
    assert "--follow" in bash_complete(shell_env, "klog consume orders --fo")
    other = os.path.join(os.path.dirname(shell_env["KLOG_DATA_DIR"]), "other")
    with klog.open(other) as s:
        s.create_topic("elsewhere")
    assert bash_complete(shell_env, f"klog consume --data-dir {other} e") == ["elsewhere"]


def test_a_tab_is_fast_and_reads_the_store_read_only(shell_env):
    """A Tab skips Typer, rich and the rest of the CLI (what made it slow), and writes nothing. Its
    time is a benchmark figure (benchmarks/run.py startup), not asserted here: a loaded machine's
    scheduler would decide such an assertion, not the code."""
    meta = os.path.join(shell_env["KLOG_DATA_DIR"], "meta")
    before = os.stat(os.path.join(meta, "data.mdb")).st_mtime_ns  # lock.mdb: LMDB's reader table
    env = {**shell_env, "COMP_WORDS": "klog consume o", "COMP_CWORD": "2", "_KLOG_COMPLETE": "complete_bash"}
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "klog"], capture_output=True, env=env,
                       timeout=30)
    assert r.stdout.split() == [b"order-events", b"orders"], r.stderr
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in r.stderr.decode().splitlines()
                if line.startswith("import time:")}
    assert "klog" in imported and not imported & {"typer", "rich", "click", "pydantic"}, sorted(imported)
    assert os.stat(os.path.join(meta, "data.mdb")).st_mtime_ns == before
    missing = {**env, "KLOG_DATA_DIR": os.path.join(shell_env["KLOG_DATA_DIR"], "nope")}
    r = subprocess.run(["klog"], capture_output=True, env=missing, timeout=30)
    assert (r.returncode, r.stdout) == (0, b"") and not os.path.exists(missing["KLOG_DATA_DIR"])


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_script_completes_topic_names(shell_env):
    script = (f"compdef() {{ : }}\n_arguments() {{ print -r -- \"$@\" }}\n_files() {{ print FILES }}\n"
              f"source {COMPLETIONS}/_klog\nwords=(klog consume ord); CURRENT=3\n_klog_completion\n")
    r = subprocess.run(["zsh", "-f", "-c", script], capture_output=True, env=shell_env, timeout=30, text=True)
    assert r.returncode == 0, r.stderr
    assert '"order-events"' in r.stdout and '"orders"' in r.stdout and "payments" not in r.stdout, r.stdout


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_script_completes_topic_names(shell_env):
    script = f"source {COMPLETIONS}/klog.fish; complete -C 'klog consume ord'; complete -C 'klog groups describe '"
    r = subprocess.run(["fish", "--no-config", "-c", script], capture_output=True, env=shell_env, timeout=30,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert sorted(line.split("\t")[0] for line in r.stdout.splitlines()) == ["billing", "order-events", "orders"]


def test_the_spec_is_the_live_cli():
    """completion_spec.json is regenerated with the man pages (tests/test_docs_fresh.py); here: its
    topic-taking positions are where the CLI takes topics."""
    from klog.cli.complete import load_spec

    spec = load_spec()["commands"]
    assert spec["consume"]["args"] == ["topic"] and spec["groups"]["commands"]["describe"]["args"] == ["group"]
    assert spec["consume"]["values"]["-G"] == "group" and spec["produce"]["options"]["--input"] is True


@pytest.mark.slow
def test_a_tab_on_a_cut_metadata_database_offers_nothing_and_prints_nothing(shell_env):
    """A `data.mdb` cut short (a copy that stopped early) made LMDB read past the file's end: the Tab
    died of SIGBUS and the shell printed "Bus error" into the command line. The cut is now seen
    before LMDB maps the file (klog.meta.db.cut_short, the check every command makes), and the Tab
    offers no names, silently; commands themselves still say what is wrong."""
    data_file = os.path.join(shell_env["KLOG_DATA_DIR"], "meta", "data.mdb")
    with open(data_file, "rb") as f:
        whole = f.read()
    page = 4096
    for size in (0, 100, 2 * page, 2 * page + 100, len(whole) - page, len(whole) - 1):
        with open(data_file, "wb") as f:
            f.write(whole[:size])
        for shell in ("complete_bash", "complete_zsh", "complete_fish"):
            env = {**shell_env, "COMP_WORDS": "klog consume o", "COMP_CWORD": "2",
                   "_TYPER_COMPLETE_ARGS": "klog consume o", "_KLOG_COMPLETE": shell}
            r = subprocess.run([sys.executable, "-m", "klog"], capture_output=True, env=env, timeout=30)
            assert r.returncode == 0 and r.stderr == b"", (size, shell, r)
            assert r.stdout in (b"", b"_files\n"), (size, shell, r.stdout)  # zsh: its own file completion
        assert bash_complete(shell_env, "klog consume o") == [], size
    with open(data_file, "wb") as f:
        f.write(whole)
    assert bash_complete(shell_env, "klog consume o") == ["order-events", "orders"]
