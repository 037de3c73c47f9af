"""The hot path (klog.cli.hot) runs consume and produce exactly as Typer would: the same values reach
the command's body for every argument vector it accepts, and whatever it is not sure of goes to Typer
(so help, completion and errors are Typer's own)."""

from __future__ import annotations

import pytest

from klog.cli import hot

CASES = [
    ["consume", "t"],
    ["consume", "t", "u", "-n", "5", "-f"],
    ["consume", "-t", "t", "-c", "2", "-e", "-q", "-K", "\\t", "-D", "\\0"],
    ["consume", "t", "-o", "-10", "--format", "%k %s\\n", "-p", "0", "-p", "2"],
    ["consume", "t", "-fn3", "-X", "isolation.level=read_committed", "--json"],
    ["consume", "t", "--count=7", "--grep", "x", "--last", "4", "-Gg", "-o", "beginning"],
    ["consume", "t", "-b", "127.0.0.1:1", "--cluster", "c", "-X", "a=b", "-d", "/tmp/x"],
    ["consume", "--pattern", "o.*", "--since", "15m ago", "--until", "now", "--tail", "3"],
    ["consume", "t", "--", "-weird-topic"],
    ["consume", "t", "-n", "2", "-n", "3"],
    ["produce", "t"],
    ["produce", "t", "a.txt", "-", "b.txt"],
    ["produce", "t", "-K", ":", "-H", "a=1", "-H", "b=2", "-p", "1", "--acks", "1", "-z", "gzip"],
    ["produce", "t", "--input", "raw", "-k", "mykey", "--print-offsets", "--linger-ms", "5", "--batch-size=100"],
    ["produce", "t", "-D", "\\0", "-X", "acks=all", "-b", "h:1"],
]

NOT_SURE = [
    ["consume", "t", "--help"],
    ["consume", "-h"],
    ["consume", "t", "--no-such-option"],
    ["consume", "t", "-n"],
    ["consume", "t", "-n", "five"],
    ["consume", "t", "-n", " 5"],
    ["consume", "t", "--json=yes"],
    ["produce", "-t"],  # (no topic at all is produce's own one-line error: the topic may be -t T)
    ["produce", "t", "-Z"],
    ["produce", "t", "--batch-size", "1e6"],
    ["topics", "list"],
]


def typer_kwargs(args, monkeypatch):
    """What Typer hands the command (before the cluster options choose the backend) for `args`."""
    from klog.cli import app

    seen = []
    monkeypatch.setattr(app, "with_cluster", lambda body, kw, has_x: seen.append(dict(kw)))
    app._register(set(hot.COMMANDS))
    app._typer_run(args)
    return seen[0] if seen else None


def hot_kwargs(args):
    import json

    with open(hot.SPEC_FILE, encoding="utf-8") as f:
        spec = json.load(f)[args[0]]
    return hot.parse(spec, args[1:])


@pytest.mark.parametrize("args", CASES, ids=" ".join)
def test_the_hot_path_passes_what_typer_passes(args, monkeypatch, data_dir):
    monkeypatch.setenv("KLOG_BOOTSTRAP_SERVERS", "")
    expected = typer_kwargs(args, monkeypatch)
    assert expected is not None
    assert hot_kwargs(args) == expected


def test_environment_options_are_read_as_typer_reads_them(monkeypatch, data_dir):
    monkeypatch.setenv("KLOG_BOOTSTRAP_SERVERS", "127.0.0.1:9")
    args = ["consume", "t"]
    assert hot_kwargs(args) == typer_kwargs(args, monkeypatch)
    assert hot_kwargs(args)["data_dir"] == data_dir


@pytest.mark.parametrize("args", NOT_SURE, ids=" ".join)
def test_what_the_hot_path_is_not_sure_of_goes_to_typer(args, cli):
    assert hot.run_hot(args) is None


def test_the_spec_is_what_typer_builds_today():
    with open(hot.SPEC_FILE, encoding="utf-8") as f:
        assert f.read() == hot.spec_text(), "run `python -m klog.cli.hot` and commit klog/cli/hot_spec.json"


def test_typer_still_runs_the_hot_commands_the_same(cli, capfdbinary):
    from klog.cli import app

    assert cli("produce", "t", "-k", "k", input=b"a\nb\n").exit_code == 0
    app._register(set(hot.COMMANDS))
    capfdbinary.readouterr()
    assert app._typer_run(["consume", "t", "-K", ":", "-c", "1"]) in (None, 0)
    assert capfdbinary.readouterr().out == b"k:a\n"


def test_a_missing_or_stale_spec_hands_the_command_to_typer(cli, monkeypatch, tmp_path):
    import json

    monkeypatch.setattr(hot, "SPEC_FILE", str(tmp_path / "missing.json"))
    assert hot.run_hot(["consume", "t"]) is None
    with open(hot.__file__.replace("hot.py", "hot_spec.json"), encoding="utf-8") as f:
        spec = json.load(f)
    gone = {**spec["consume"]["params"][-1], "name": "gone", "opts": ["--gone"]}
    spec["consume"]["params"].append(gone)  # an option the command's body no longer takes
    (tmp_path / "stale.json").write_text(json.dumps(spec), encoding="utf-8")
    monkeypatch.setattr(hot, "SPEC_FILE", str(tmp_path / "stale.json"))
    assert hot.run_hot(["consume", "t", "--gone", "x"]) is None
