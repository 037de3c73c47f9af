"""How records leave a command is chosen once (klog.cli.output.record_output) from one Env: the
terminal view, JSON, a --format string or raw values. An Env substituted for the process's is what
consume and replay then follow: a terminal's view without a pty."""

import json

import pytest

from klog.cli.env import Env, current_env, substitute_env
from klog.cli.output import OutputFormat, record_output
from klog.client.records import Record
from klog.errors import UsageError

PIPE, TERMINAL = Env(), Env(stdout_tty=True)
RECORD = Record("t", 0, 7, 1_700_000_000_000, 0, b"k", b"v\xc2\x9b", [])


@pytest.mark.parametrize(("env", "fmt", "as_json", "chosen", "line"), [
    (PIPE, None, False, OutputFormat.RAW, b"v\xc2\x9b\n"),
    (TERMINAL, None, False, OutputFormat.VIEW, None),
    (PIPE, None, True, OutputFormat.JSON, None),
    (PIPE, "%o:%s\\n", False, OutputFormat.FORMAT, b"7:v\xc2\x9b\n"),
    (TERMINAL, "%o:%s\\n", False, OutputFormat.FORMAT, b"7:v\\x9b\n"),  # escaped for the terminal
])
def test_one_choice_from_the_environment(env, fmt, as_json, chosen, line) -> None:
    output = record_output(env, fmt, as_json)
    assert output.format is chosen
    if line is not None:
        assert output.render()(RECORD) == line


def test_json_on_a_terminal_escapes_c1_controls_and_stays_the_same_json() -> None:
    piped = record_output(PIPE, None, True).render()(RECORD)
    shown = record_output(TERMINAL, None, True).render()(RECORD)
    assert b"\\u009b" in shown and b"\\u009b" not in piped
    assert json.loads(shown) == json.loads(piped)


def test_format_and_json_together_are_refused() -> None:
    with pytest.raises(UsageError, match="use --format or --json, not both"):
        record_output(PIPE, "%s", True)


def test_a_substituted_terminal_gets_the_view_and_a_pipe_the_values(cli, store) -> None:
    with store.producer() as p:
        p.send("t", b"hello")
    assert cli("consume", "t").stdout == b"hello\n"
    with substitute_env(TERMINAL) as env:
        assert current_env() is env
        shown = cli("consume", "t", "--no-color")
    assert shown.exit_code == 0 and b"hello" in shown.stdout and shown.stdout != b"hello\n"
    assert current_env() is not TERMINAL


def test_tables_take_the_width_from_the_env(monkeypatch, capsys) -> None:
    from klog.cli.tables import print_heading

    monkeypatch.setenv("COLUMNS", "20")
    assert PIPE.width() is None and TERMINAL.width() == 20
    parts = ["Topic orders", "partitions 3", "replication 1"]
    print_heading(parts)
    assert capsys.readouterr().out == "Topic orders  partitions 3  replication 1\n"  # a pipe: one line
    with substitute_env(TERMINAL):
        print_heading(parts)
    assert capsys.readouterr().out == "Topic orders\npartitions 3\nreplication 1\n"  # wrapped between fields
