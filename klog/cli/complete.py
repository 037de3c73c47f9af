"""Shell completion answered without Typer or rich: a Tab must not start the whole CLI.

The completion scripts (completions/, `klog --install-completion`) run `klog` with _KLOG_COMPLETE set
to complete_bash, complete_zsh or complete_fish, the protocol of Typer's scripts. klog's entry points
(klog.cli.entry, `python -m klog`) send those runs here: the command tree comes from
completion_spec.json (generated from the live CLI by `python -m klog.cli.gendocs`) and topic and
group names straight from the store's LMDB, opened read-only. Anything else falls back to Typer.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from typing import Any

SPEC_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "completion_spec.json")
_WHITESPACE = re.compile(r"\s")
SHELLS = {"complete_bash": "bash", "complete_zsh": "zsh", "complete_fish": "fish"}


def load_spec() -> dict[str, Any]:
    with open(SPEC_FILE, encoding="utf-8") as f:
        return json.load(f)


# -- the command line ------------------------------------------------------------------------------
def split_words(line: str) -> list[str]:
    """Words as the shell would split them; an unfinished quote keeps its text (click's habit)."""
    lex = shlex.shlex(line, posix=True)
    lex.whitespace_split = True
    lex.commenters = ""
    out: list[str] = []
    try:
        out.extend(lex)
    except ValueError:
        out.append(lex.token)
    return out


def completion_args(shell: str) -> tuple[list[str], str]:
    """(the words after `klog` before the cursor, the word being completed), as Typer reads them."""
    if shell == "bash":
        words = split_words(os.environ.get("COMP_WORDS", ""))
        cword = int(os.environ.get("COMP_CWORD", "0") or 0)
        return words[1:cword], words[cword] if cword < len(words) else ""
    line = os.environ.get("_TYPER_COMPLETE_ARGS", "")
    words = split_words(line)[1:]
    if words and not line.endswith(" "):
        return words[:-1], words[-1]
    return words, ""


# -- names from the store --------------------------------------------------------------------------
def data_dir_of(args: list[str]) -> str:
    for i, arg in enumerate(args):
        if arg in ("--data-dir", "-d") and i + 1 < len(args):
            return os.path.expanduser(args[i + 1])
        if arg.startswith("--data-dir="):
            return os.path.expanduser(arg.split("=", 1)[1])
    if os.environ.get("KLOG_DATA_DIR"):
        return os.environ["KLOG_DATA_DIR"]
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "klog")


def store_names(data_dir: str, kind: str) -> list[str]:
    """Topic or group names of the store, read-only (no store: none). Keys only, nothing decoded."""
    meta = os.path.join(data_dir, "meta")
    data_file = os.path.join(meta, "data.mdb")
    if not os.path.isfile(data_file):
        return []
    try:
        import lmdb

        from klog.meta.data_file import cut_short
    except ImportError:
        return []
    if cut_short(data_file) is not None:
        # LMDB maps the file and reads the pages its meta page names: past the end of a cut file
        # that is SIGBUS, and the shell printed "Bus error" into the user's command line
        return []
    env = None
    for lock in (True, False):  # a store we may not write to: read without LMDB's reader lock
        try:
            env = lmdb.open(meta, readonly=True, lock=lock, max_dbs=8, subdir=True, create=False)
            break
        except lmdb.Error:
            continue
    if env is None:
        return []
    try:
        names: set[str] = set()
        with env.begin() as txn:
            for db_name in ("topics",) if kind == "topic" else ("groups", "offsets"):
                try:
                    db = env.open_db(db_name.encode(), txn=txn, create=False)
                except lmdb.Error:
                    continue
                for key in txn.cursor(db=db).iternext(keys=True, values=False):
                    names.add(key.split(b"\0", 1)[0].decode("utf-8", "replace"))
        return sorted(names)
    except lmdb.Error:
        return []
    finally:
        env.close()


# -- what fits at the cursor -----------------------------------------------------------------------
def candidates(spec: dict[str, Any], args: list[str], incomplete: str) -> list[tuple[str, str]] | None:
    """(value, help) pairs for the word at the cursor; None: let the shell complete file names."""
    node = spec
    positional = 0
    expecting: str | None = None  # the option whose value comes next
    for arg in args:
        if expecting is not None:
            expecting = None
            continue
        if arg.startswith("-") and arg != "-":
            name = arg.split("=", 1)[0]
            if "=" not in arg and node.get("options", {}).get(name):
                expecting = name
            continue
        commands = node.get("commands")
        if commands and arg in commands and positional == 0:
            node = commands[arg]
            continue
        positional += 1
    if expecting is not None:
        return _values(node.get("values", {}).get(expecting), args)
    if incomplete.startswith("-"):
        return [(o, "") for o in sorted(node.get("options", {}))]
    if node.get("commands"):
        return [(name, sub.get("help", "")) for name, sub in node["commands"].items()]
    kinds = node.get("args", [])
    if not kinds:
        return []
    return _values(kinds[min(positional, len(kinds) - 1)], args)


def _values(kind: Any, args: list[str]) -> list[tuple[str, str]] | None:
    if isinstance(kind, list):
        return [(v, "") for v in kind]
    if kind in ("topic", "group"):
        return [(n, "") for n in store_names(data_dir_of(args), kind)]
    return None  # a file, a folder, free text: the shell's own completion


# -- the shells' formats (Typer's) ------------------------------------------------------------------
def _zsh_escape(s: str) -> str:
    return (s.replace('"', '""').replace("'", "''").replace("$", "\\$").replace("`", "\\`")
            .replace(":", r"\\:"))


def render(shell: str, items: list[tuple[str, str]] | None) -> tuple[str, int]:
    if shell == "bash":
        return "\n".join(v for v, _ in items or []), 0
    if shell == "zsh":
        if not items:
            return "_files", 0
        lines = [f'"{_zsh_escape(v)}":"{_zsh_escape(h)}"' if h else f'"{_zsh_escape(v)}"' for v, h in items]
        return "_arguments '*: :((" + "\n".join(lines) + "))'", 0
    if os.environ.get("_TYPER_COMPLETE_FISH_ACTION") == "is-args":
        return "", 0 if items else 1
    return "\n".join(f"{v}\t{_WHITESPACE.sub(' ', h)}" if h else v for v, h in items or []), 0


def complete() -> int | None:
    """Answer a completion request of a completion script; None when it is not one this handles."""
    shell = SHELLS.get(os.environ.get("_KLOG_COMPLETE", ""))
    if shell is None:
        return None
    try:
        spec = load_spec()
    except (OSError, ValueError):
        return None  # no generated spec (a source tree mid-change): Typer answers instead
    args, incomplete = completion_args(shell)
    items = candidates(spec, args, incomplete)
    if items is not None:
        items = [(v, h) for v, h in items if v.startswith(incomplete)]
    text, code = render(shell, items)
    if text:
        sys.stdout.write(text + "\n")
    sys.stdout.flush()
    return code
