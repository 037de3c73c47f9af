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


# -- the man pages' own sections (klog/cli/manual.py) ------------------------------------------
MAN_SECTIONS = ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXAMPLES", "EXIT STATUS", "ENVIRONMENT", "FILES",
                "SEE ALSO")


def test_every_command_has_a_manual_entry_and_every_entry_a_command(cli) -> None:  # noqa: ANN001
    from klog.cli.manual import MANUAL

    paths = {path for path, _ in gendocs.walk_commands(cli)}
    assert sorted(paths - set(MANUAL)) == [], "add the command's examples to klog/cli/manual.py"
    assert sorted(set(MANUAL) - paths) == [], "klog/cli/manual.py describes commands that no longer exist"


def test_man_pages_have_every_section_in_order() -> None:
    for page in sorted((gendocs.REPO_ROOT / "man").glob("*.1")):
        headings = re.findall(r"^\.SH (.+)$", page.read_text(encoding="utf-8"), flags=re.M)
        present = [h for h in headings if h in MAN_SECTIONS]
        assert present == list(MAN_SECTIONS), f"{page.name}: sections {headings}"


def test_see_also_names_pages_that_exist() -> None:
    for page in (gendocs.REPO_ROOT / "man").glob("*.1"):
        text = page.read_text(encoding="utf-8")
        see_also = text[text.index(".SH SEE ALSO"):]
        for target in re.findall(r"\\fB(klog[^\\]*(?:\\-[^\\]*)*)\\fP\(1\)", see_also):
            name = target.replace(r"\-", "-") + ".1"
            assert (gendocs.REPO_ROOT / "man" / name).is_file(), f"{page.name} points at missing {name}"
        doc = re.search(r"^(docs/\S+|README\.md) in klog's source", see_also, flags=re.M)
        assert doc and (gendocs.REPO_ROOT / doc.group(1)).is_file(), f"{page.name}: its docs page is missing"


@pytest.fixture(scope="module")
def example_store(tmp_path_factory):  # noqa: ANN001, ANN201
    """A scratch home whose default store holds what the examples name: orders (3 partitions, 300 keyed
    records) and events."""
    import subprocess

    from test_readme import scratch_env

    base = tmp_path_factory.mktemp("man-examples")
    env, work = scratch_env(base)
    setup = ("klog topics create orders -p 3 && seq 300 | awk '{print \"k\" $1 % 17 \":v\" $1}' | "
             "klog produce orders -K: && printf 'a\\nb\\n' | klog produce events")
    subprocess.run(["bash", "-e", "-o", "pipefail", "-c", setup], cwd=work, env=env, check=True,
                   capture_output=True)
    return base


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(__import__("klog.cli.manual", fromlist=["MANUAL"]).MANUAL))
def test_man_page_examples_run(path: str, example_store, tmp_path) -> None:  # noqa: ANN001
    """Every example line works against a scratch store, in a copy made for each command."""
    import shutil
    import subprocess

    from test_readme import scratch_env

    from klog.cli.manual import MANUAL

    entry = MANUAL[path]
    if entry.not_run:
        pytest.skip(entry.not_run)
    shutil.copytree(example_store, tmp_path, dirs_exist_ok=True, symlinks=True)
    env, work = scratch_env(tmp_path)
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", entry.examples], cwd=work, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{path}'s examples exit {done.returncode}:\n{done.stderr[-2000:]}"
