"""Generate shell completions and man pages from the live CLI.

    python -m klog.cli.gendocs            # rewrite completions/, man/ and klog/cli/completion_spec.json
    python -m klog.cli.gendocs --check    # exit 1 and list the stale files if anything differs

Completions (`completions/klog.bash`, `completions/_klog`, `completions/klog.fish`) are exactly what
`klog --show-completion SHELL` prints: prog name `klog`, complete var `_KLOG_COMPLETE`. They come from
Typer's script templates, not click's `BashComplete.source()`: Typer 0.29 vendors click and registers
its own completion classes, which take `complete_bash`-style instructions and reject click's
`bash_complete` ("Shell complete not supported."), so click's scripts would never complete anything.

Man pages (`man/klog.1`, `man/klog-produce.1`, `man/klog-topics-create.1`, ...) are click-man `ManPage`s
filled from `typer.main.get_command(app)` the way `click_man.core.generate_man_page` fills them. That
function is not called directly: it keeps options with `isinstance(x, click.Option)`, and Typer's
vendored parameters are not `click.Option`s, so every OPTIONS section would come out empty. The date
field is left empty and the source is `klog VERSION`, so the output is the same on every machine and every
day. After the sections that come from `--help` (NAME, SYNOPSIS, DESCRIPTION, ARGUMENTS, OPTIONS,
COMMANDS), each page gets EXAMPLES, EXIT STATUS, ENVIRONMENT, FILES and SEE ALSO from the command's entry
in klog/cli/manual.py (a new command needs one: generation fails without it).

Typer, click-man and the CLI are imported inside functions: click-man is a test extra, not a dependency.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from inspect import cleandoc
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PROG_NAME = "klog"
COMPLETE_VAR = "_KLOG_COMPLETE"
COMPLETION_FILES = {"bash": "klog.bash", "zsh": "_klog", "fish": "klog.fish"}
OUTPUT_DIRS = ("completions", "man")
# NAME line: the first sentence of the help, whole (click-man's default cuts it at 45 characters)
SHORT_HELP_CHARS_MAX = 1000
# the generated text must not depend on the terminal (or CI) that runs the generator
PINNED_ENV = {"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"}
UNSET_ENV = ("FORCE_COLOR", "PY_COLORS", "CLICOLOR_FORCE", "GITHUB_ACTIONS", "TERMINAL_WIDTH",
             "KLOG_DATA_DIR", "XDG_DATA_HOME",  # --data-dir's help names the store in force
             # makes get_command() swap --install/--show-completion flags for shell-name options
             "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION")


@contextlib.contextmanager
def pinned_env() -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in (*PINNED_ENV, *UNSET_ENV)}
    os.environ.update(PINNED_ENV)
    for name in UNSET_ENV:
        os.environ.pop(name, None)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def cli_command():  # noqa: ANN201 - the Typer-built click command
    """The root command exactly as `klog` builds it, under a pinned environment."""
    import typer.main

    from klog.cli.app import full_app

    with pinned_env():
        return typer.main.get_command(full_app())


def walk_commands(cli) -> Iterator[tuple[str, object]]:  # noqa: ANN001
    """(command path, command) for the root and every visible subcommand, depth first, in CLI order."""
    def walk(path: str, cmd) -> Iterator[tuple[str, object]]:  # noqa: ANN001
        yield path, cmd
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            if not sub.hidden:
                yield from walk(f"{path} {name}", sub)

    yield from walk(PROG_NAME, cli)


def man_page_name(command_path: str) -> str:
    return command_path.replace(" ", "-") + ".1"


# -- rendering ---------------------------------------------------------------------------------
def render_all() -> dict[str, str]:
    """Every generated file: path relative to the repository root -> text."""
    from klog import __version__

    with pinned_env():
        cli = cli_command()
        files = {f"completions/{name}": completion_script(shell) for shell, name in COMPLETION_FILES.items()}
        files[COMPLETION_SPEC] = completion_spec(cli)
        files.update({f"man/{name}": text for name, text in man_pages(cli, __version__).items()})
    return files


def completion_script(shell: str) -> str:
    """What `klog --show-completion SHELL` prints (Typer's template for the shell)."""
    from typer._completion_shared import get_completion_script

    return get_completion_script(prog_name=PROG_NAME, complete_var=COMPLETE_VAR, shell=shell) + "\n"


def man_pages(cli, version: str) -> dict[str, str]:  # noqa: ANN001
    """One page per command and subcommand: file name -> roff text."""
    pages: dict[str, str] = {}

    def walk(ctx) -> None:  # noqa: ANN001
        pages[man_page_name(ctx.command_path)] = man_page(ctx, version)
        for name, sub in (getattr(ctx.command, "commands", None) or {}).items():
            if not sub.hidden:
                walk(sub.context_class(sub, info_name=name, parent=ctx))

    walk(cli.context_class(cli, info_name=PROG_NAME))
    return pages


def man_page(ctx, version: str) -> str:  # noqa: ANN001
    """click_man.core.generate_man_page, for Typer's vendored click (see the module docstring)."""
    from click_man.core import get_short_help_str
    from click_man.man import ManPage

    cmd = ctx.command
    page = ManPage(ctx.command_path)
    page.version = f"klog {version}"  # the footer's left: "klog 0.1.0"
    page.date = ""  # no build date: it would make every regeneration differ
    page.short_help = roff_text(get_short_help_str(cmd, limit=SHORT_HELP_CHARS_MAX))
    page.description = roff_text(cleandoc(cmd.help or ""))
    page.synopsis = " ".join(cmd.collect_usage_pieces(ctx))
    # a group's only option is --help, which click-man leaves out: say it, so every page has OPTIONS
    page.options = ([(opt, roff_text(text)) for opt, text in help_records(ctx, "option")]
                    or [("-h, --help", "Show this message and exit.")])
    subcommands = {name: sub for name, sub in (getattr(cmd, "commands", None) or {}).items() if not sub.hidden}
    page.commands = [(name, roff_text(get_short_help_str(sub, limit=SHORT_HELP_CHARS_MAX)))
                     for name, sub in subcommands.items()]
    text = str(page)
    # click-man points at "klog topics-create(1)"; the page is klog-topics-create(1)
    dashed = ctx.command_path.replace(" ", r"\-")
    for name in subcommands:
        text = text.replace(rf"See \fB{ctx.command_path}-{name}(1)\fP", rf"See \fB{dashed}\-{name}(1)\fP")
    text = insert_arguments_section(text, help_records(ctx, "argument"))
    return text + manual_sections(ctx, subcommands)


def manual_sections(ctx, subcommands: dict) -> str:  # noqa: ANN001
    """EXAMPLES, EXIT STATUS, ENVIRONMENT, FILES and SEE ALSO from klog/cli/manual.py, plus the
    environment variables the command's own options read."""
    from klog.cli.manual import EXIT_STATUS, MANUAL

    path = ctx.command_path
    entry = MANUAL[path]  # KeyError: a new command needs its entry in klog/cli/manual.py
    lines = [".SH EXAMPLES", ".nf", roff_text(entry.examples.strip()), ".fi"]
    if entry.not_run:
        lines += [".PP", roff_text(f"(Not run by the tests: {entry.not_run}.)")]
    lines.append(".SH EXIT STATUS")
    specific = dict(entry.exit_status)
    for code, text in EXIT_STATUS:
        lines += [".TP", rf"\fB{code}\fP", roff_text(specific.pop(code, text))]
    for code, text in specific.items():
        lines += [".TP", rf"\fB{code}\fP", roff_text(text)]
    lines.append(".SH ENVIRONMENT")
    for name, text in [*option_environment(ctx), *entry.environment] or [("", "None.")]:
        lines += [".TP", rf"\fB{name}\fP", roff_text(text)] if name else [roff_text(text)]
    lines.append(".SH FILES")
    for name, text in entry.files or (("", "None."),):
        lines += [".TP", rf"\fI{roff_text(name)}\fP", roff_text(text)] if name else [roff_text(text)]
    lines.append(".SH SEE ALSO")
    parent = path.rsplit(" ", 1)[0] if " " in path else None
    pages = [p for p in ([parent] if parent else []) + [f"{path} {name}" for name in subcommands]]
    names = [man_page_name(p)[:-2] for p in pages] + list(entry.see_also)
    refs = ", ".join(rf"\fB{name.replace('-', chr(92) + '-')}\fP(1)" for name in dict.fromkeys(names))
    lines.append(refs + ("." if refs else ""))
    doc = f"docs/{entry.doc}" if entry.doc else "README.md"
    lines += [".PP", roff_text(f"{doc} in klog's source: the long form, with the reasons.")]
    return "\n".join(lines) + "\n"


def option_environment(ctx) -> list[tuple[str, str]]:  # noqa: ANN001
    """(VARIABLE, what it sets) for each option that reads an environment variable."""
    found = []
    for param in ctx.command.params:
        envvar = getattr(param, "envvar", None)
        if envvar and not getattr(param, "hidden", False):
            first = (param.help or "").split(". ")[0].rstrip(".")
            found.append((envvar, f"As {max(param.opts, key=len)}: {first}."))
    return found


def help_records(ctx, kind: str) -> list[tuple[str, str]]:  # noqa: ANN001
    records = []
    for param in ctx.command.params:
        if param.param_type_name != kind or getattr(param, "hidden", False):
            continue
        record = param.get_help_record(ctx)
        if record is not None:
            records.append(record)
    return records


def insert_arguments_section(text: str, arguments: list[tuple[str, str]]) -> str:
    """click-man shows arguments only in the synopsis; Typer has help for them too."""
    if not arguments:
        return text
    lines = [".SH ARGUMENTS"]
    for name, help_text in arguments:
        words = name.replace("-", r"\-").split()
        lines += [".TP", rf"\fB{words[0]}\fP" + "".join(" " + w for w in words[1:]), roff_text(help_text)]
    block = "\n".join(lines) + "\n"
    for anchor in (".SH OPTIONS\n", ".SH COMMANDS\n"):
        at = text.find(anchor)
        if at != -1:
            return text[:at] + block + text[at:]
    return text + block


def roff_text(text: str) -> str:
    r"""Make help text literal in roff: `\n` in a help string is not a number register, and a line
    starting with `.` or `'` is not a request. click-man passes help text through unescaped."""
    text = text.replace("\\", r"\e")
    return re.sub(r"(?m)^([.'])", r"\\&\1", text)


# -- writing and checking ----------------------------------------------------------------------
# -- the completion spec (read by klog/cli/complete.py, which answers a Tab without Typer) ----------
COMPLETION_SPEC = "klog/cli/completion_spec.json"
# option values the help does not spell as `a | b | c`
OPTION_VALUES = {"--compression": ["none", "gzip", "snappy", "lz4", "zstd"], "--acks": ["all", "1", "0"]}
_CHOICES = re.compile(r"^\s*([a-z][\w.-]*(?: \| [\w.-]+)+)")


def option_values(opts: list[str], help_text: str, param) -> object:  # noqa: ANN001
    """A list of the values an option takes, "topic" or "group" (names from the store), or None."""
    choices = getattr(getattr(param, "type_descriptor", None), "choices", None)
    if choices:
        return [str(c) for c in choices]
    long = max(opts, key=len)
    if long in OPTION_VALUES:
        return OPTION_VALUES[long]
    if long in ("--topic", "--to-topic") or re.match(r"(Source|Target) topic|Topic to|Produce the result to this "
                                                    r"topic", help_text):
        return "topic"
    if long == "--group":
        return "group"
    m = _CHOICES.match(help_text)
    if m:
        return [v.rstrip(".,") for v in m.group(1).split(" | ") if v.islower()]
    return None


def argument_kind(name: str, help_text: str) -> str | None:
    if name in ("topic", "topics") or (name == "source" and "topic" in help_text.lower()):
        return "topic"
    return "group" if name == "group" else None


def completion_spec(cli) -> str:  # noqa: ANN001
    """The command tree as completion needs it: subcommands (with their help's first line), options
    (true: takes a value), option values and the kind of each positional argument."""
    def node(cmd) -> dict:  # noqa: ANN001
        out: dict = {}
        subs = {name: sub for name, sub in (getattr(cmd, "commands", None) or {}).items() if not sub.hidden}
        if subs:
            out["commands"] = {name: {"help": (sub.get_short_help_str(limit=80) or ""), **node(sub)}
                               for name, sub in subs.items()}
        options, values, args = {}, {}, []
        for param in cmd.params:
            if getattr(param, "hidden", False):
                continue
            help_text = getattr(param, "help", None) or ""
            if param.param_type_name == "option":
                for opt in (*param.opts, *param.secondary_opts):
                    options[opt] = not param.is_flag
                if not param.is_flag:
                    found = option_values(list(param.opts), help_text, param)
                    if found is not None:
                        values.update(dict.fromkeys(param.opts, found))
            else:
                args.append(argument_kind(param.name, help_text))
        options.update({"--help": False, "-h": False})
        out["options"] = dict(sorted(options.items()))
        if values:
            out["values"] = dict(sorted(values.items()))
        if args:
            out["args"] = args
        return out

    return json.dumps(node(cli), indent=1, sort_keys=False) + "\n"


def write_all(root: Path, files: dict[str, str] | None = None) -> list[str]:
    """Write the generated files under `root`; remove generated-looking files no longer produced.
    Returns the paths written or removed whose content changed."""
    files = render_all() if files is None else files
    changed = []
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8", newline="\n")
            changed.append(rel)
    for rel in sorted(set(existing_outputs(root)) - set(files)):
        (root / rel).unlink()
        changed.append(rel)
    return changed


def existing_outputs(root: Path) -> list[str]:
    """Files under completions/ and man/ (the generator owns both folders)."""
    out = []
    for folder in OUTPUT_DIRS:
        base = root / folder
        if base.is_dir():
            out += [p.relative_to(root).as_posix() for p in sorted(base.iterdir()) if p.is_file()]
    if (root / COMPLETION_SPEC).is_file():
        out.append(COMPLETION_SPEC)
    return out


def stale_files(root: Path = REPO_ROOT) -> list[str]:
    """Regenerate into a temporary folder; list what differs from `root` (changed, missing or extra)."""
    with tempfile.TemporaryDirectory(prefix="klog-gendocs-") as tmp:
        fresh = Path(tmp)
        write_all(fresh)
        generated = existing_outputs(fresh)
        stale = [rel for rel in generated
                 if not (root / rel).is_file() or (root / rel).read_bytes() != (fresh / rel).read_bytes()]
    stale += sorted(set(existing_outputs(root)) - set(generated))
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m klog.cli.gendocs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 listing stale files instead of writing")
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    try:
        import click_man  # noqa: F401
    except ImportError:
        print("gendocs: click-man is missing: pip install -e '.[test]'", file=sys.stderr)
        return 2
    if args.check:
        stale = stale_files(args.root)
        for rel in stale:
            print(f"stale: {rel}", file=sys.stderr)
        if stale:
            print("gendocs: run `python -m klog.cli.gendocs` to regenerate", file=sys.stderr)
            return 1
        return 0
    for rel in write_all(args.root):
        print(f"wrote {rel}" if (args.root / rel).exists() else f"removed {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
