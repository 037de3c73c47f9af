"""Generated docs cannot drift from the CLI.

Goal: completions/ and man/ are what `python -m klog.cli.gendocs` writes from the live CLI today; every
command and subcommand has help text and a man page; the completion scripts actually complete.
Method: run the generator's check in-process (it regenerates into a temporary folder and compares),
walk the Typer-built command tree, and drive the CLI with each script's completion instruction.
"""

from __future__ import annotations

import re

import pytest

pytest.importorskip("click_man")

from klog.cli import gendocs  # noqa: E402

REGENERATE = "run `python -m klog.cli.gendocs` and commit completions/, man/ and klog/cli/completion_spec.json"


@pytest.fixture(scope="module")
def cli():  # noqa: ANN201
    return gendocs.cli_command()


def test_completions_and_man_pages_are_fresh() -> None:
    stale = gendocs.stale_files(gendocs.REPO_ROOT)
    assert stale == [], f"stale generated files {stale}: {REGENERATE}"


def test_every_command_has_help_and_a_man_page(cli) -> None:  # noqa: ANN001
    commands = list(gendocs.walk_commands(cli))
    paths = [path for path, _ in commands]
    # the groups and commands the docs promise; a new command only adds to this
    assert {"klog", "klog produce", "klog consume", "klog offsets", "klog dump", "klog verify", "klog topics",
            "klog topics create", "klog topics list", "klog topics describe", "klog topics alter",
            "klog topics delete", "klog spark", "klog spark export", "klog spark sql", "klog spark run",
            "klog spark stream", "klog topics clean", "klog topics delete-records",
            "klog topics compact", "klog groups", "klog groups list", "klog groups describe",
            "klog groups reset-offsets", "klog groups delete", "klog groups delete-offsets",
            "klog replay"} <= set(paths)
    for path, cmd in commands:
        assert (cmd.help or "").strip(), f"`{path}` has no help text"
        page = gendocs.REPO_ROOT / "man" / gendocs.man_page_name(path)
        assert page.is_file(), f"`{path}` has no man page {page.name}: {REGENERATE}"
        text = page.read_text(encoding="utf-8")
        assert text.startswith(f'.TH "{path.upper()}" "1"'), page.name
        for param in cmd.params:
            if param.param_type_name == "option" and not param.hidden:
                assert (param.help or "").strip(), f"`{path}` option {param.opts[0]} has no help text"
                assert param.opts[-1].replace("-", r"\-") in text, f"{page.name} lacks {param.opts[-1]}"


def test_man_pages_name_the_right_subcommand_pages() -> None:
    for page in (gendocs.REPO_ROOT / "man").glob("*.1"):
        for target in re.findall(r"See \\fB(\S+)\(1\)\\fP", page.read_text(encoding="utf-8")):
            name = target.replace(r"\-", "-") + ".1"
            assert (gendocs.REPO_ROOT / "man" / name).is_file(), f"{page.name} points at missing {name}"


@pytest.mark.parametrize("shell", sorted(gendocs.COMPLETION_FILES))
def test_completion_script_is_what_show_completion_prints(shell: str, monkeypatch, capsys) -> None:  # noqa: ANN001
    import typer.main

    from klog.cli.app import full_app

    # with detection off, --show-completion takes the shell name instead of asking the parent process
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    cmd = typer.main.get_command(full_app())
    with pytest.raises(SystemExit) as exit_info:
        cmd.main(["--show-completion", shell], prog_name="klog", standalone_mode=False)
    assert exit_info.value.code == 0
    script = (gendocs.REPO_ROOT / "completions" / gendocs.COMPLETION_FILES[shell]).read_text(encoding="utf-8")
    assert capsys.readouterr().out == script


# what the shell would send while completing, and a completion that must come back
COMPLETION_CASES = {
    "bash": ({"COMP_WORDS": "klog to", "COMP_CWORD": "1"}, "topics"),
    "zsh": ({"_TYPER_COMPLETE_ARGS": "klog topics "}, "create"),
    "fish": ({"_TYPER_COMPLETE_ARGS": "klog consume --fol", "_TYPER_COMPLETE_FISH_ACTION": "get-args"}, "--follow"),
}


@pytest.mark.parametrize("shell", sorted(gendocs.COMPLETION_FILES))
def test_completion_script_drives_the_cli(shell: str, cli, monkeypatch, capsys) -> None:  # noqa: ANN001
    """The instruction a script puts in _KLOG_COMPLETE is one the CLI accepts (click's `bash_complete`
    style is not: Typer answers "Shell complete not supported.")."""
    script = (gendocs.REPO_ROOT / "completions" / gendocs.COMPLETION_FILES[shell]).read_text(encoding="utf-8")
    instructions = set(re.findall(rf"{gendocs.COMPLETE_VAR}=(\w+)", script))
    assert len(instructions) == 1, instructions
    env, expected = COMPLETION_CASES[shell]
    for name, value in {gendocs.COMPLETE_VAR: instructions.pop(), **env}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exit_info:
        cli.main([], prog_name="klog", standalone_mode=False)
    captured = capsys.readouterr()
    assert exit_info.value.code == 0, captured.err
    assert expected in captured.out


def test_roff_text_keeps_backslashes_and_dots_literal() -> None:
    assert gendocs.roff_text("\\n newline\n.start\n'quote") == "\\en newline\n\\&.start\n\\&'quote"
