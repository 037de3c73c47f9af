"""The hot path: `klog consume` and `klog produce` parsed and run without Typer.

Building Typer's command (its pydantic adapter per parameter, rich, click) costs more than a shell
loop's `klog consume t -n 1` should: those two commands are parsed here from hot_spec.json, which is
what Typer itself built for them (`python -m klog.cli.hot` rewrites it; a test keeps it fresh), and
their bodies (klog.cli.consume_run, klog.cli.produce_run) are called with the same values Typer
would pass. Anything this parser is not sure of (--help, an unknown or malformed option, a value
that is not plainly an integer, a missing argument) returns None: Typer then runs the command, so
help, completion and every error message stay Typer's own.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

SPEC_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hot_spec.json")
COMMANDS = {"consume": ("klog.cli.consume_run", "run_consume"),
            "produce": ("klog.cli.produce_run", "run_produce")}
CLUSTER_PARAMS = {"bootstrap_server", "cluster", "client_property"}  # taken by session.with_cluster
_INTEGER = re.compile(r"-?[0-9]+\Z")


class _NotSure(Exception):  # noqa: N818 - a signal to hand the arguments to Typer
    pass


def main_hot() -> None:
    """The console entry's first step: run a hot command and exit; return for anything else."""
    from klog.cli.argv import move_global_options

    code = run_hot(move_global_options(sys.argv[1:]))
    if code is not None:
        from klog.cli.session import finish

        finish(code)


def run_hot(args: list[str]) -> int | None:
    """Run `args` (global options already moved after the command) if they are a hot command this
    parser understands: its exit code; None to let Typer run them."""
    if not args or args[0] not in COMMANDS or any(k.startswith("_KLOG_COMPLETE") for k in os.environ):
        return None
    try:
        with open(SPEC_FILE, encoding="utf-8") as f:
            spec = json.load(f)[args[0]]
        kwargs = parse(spec, args[1:])
    except (_NotSure, OSError, KeyError, ValueError):
        return None
    import importlib

    from klog.cli import session

    module, name = COMMANDS[args[0]]
    body = getattr(importlib.import_module(module), name)
    code = body.__code__
    takes = set(code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount])
    if takes != set(kwargs) - CLUSTER_PARAMS:
        return None  # a spec older than the code (not regenerated): Typer knows the options
    with session.Signals() as signals:
        return session.exit_code(
            lambda: session.pipe_safe(lambda: session.with_cluster(body, kwargs, spec["has_x"])), signals)


def parse(spec: dict[str, Any], args: list[str]) -> dict[str, Any]:
    """`args` as the keyword arguments Typer would call the command with (click's parsing rules:
    options anywhere, `--opt=value`, `-n5`, grouped short flags, `--` ends options)."""
    params = spec["params"]
    by_opt = {opt: p for p in params if p["kind"] == "option" for opt in p["opts"]}
    given: dict[str, Any] = {}
    positional: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            positional += args[i:]
            break
        if arg.startswith("--"):
            name, eq, inline = arg.partition("=")
            p = by_opt.get(name)
            if p is None:
                raise _NotSure
            if p["flag"]:
                if eq:
                    raise _NotSure
                _set(given, p, True)
                continue
            if not eq:
                if i >= len(args):
                    raise _NotSure
                inline, i = args[i], i + 1
            _set(given, p, inline)
        elif arg.startswith("-") and len(arg) > 1:
            j = 1
            while j < len(arg):
                p = by_opt.get("-" + arg[j])
                if p is None:
                    raise _NotSure
                j += 1
                if p["flag"]:
                    _set(given, p, True)
                    continue
                if j < len(arg):
                    _set(given, p, arg[j:])
                elif i < len(args):
                    _set(given, p, args[i])
                    i += 1
                else:
                    raise _NotSure
                break
        else:
            positional.append(arg)
    _assign_arguments(params, positional, given)
    return {p["name"]: _final(p, given) for p in params}


def _set(given: dict[str, Any], p: dict[str, Any], value: Any) -> None:
    value = value if p["flag"] else _convert(p, value)
    if p["multiple"]:
        given.setdefault(p["name"], []).append(value)
    else:
        given[p["name"]] = value  # click: the last one wins


def _convert(p: dict[str, Any], text: str) -> Any:
    kind = p["type"]
    if kind == "str":
        return text
    if kind == "int" and _INTEGER.match(text):
        return int(text)
    raise _NotSure  # anything else (" 5", "5.0", a float option): Typer's conversion decides


def _assign_arguments(params: list[dict[str, Any]], positional: list[str], given: dict[str, Any]) -> None:
    arguments = [p for p in params if p["kind"] == "argument"]
    fixed = sum(p["nargs"] for p in arguments if p["nargs"] > 0)
    for p in arguments:
        if p["nargs"] < 0:  # takes what the fixed ones leave
            take = max(0, len(positional) - fixed)
            values = [_convert(p, v) for v in positional[:take]]
            positional = positional[take:]
            if values:
                given[p["name"]] = values
        else:
            if len(positional) < p["nargs"]:
                if p["required"]:
                    raise _NotSure
                continue
            fixed -= p["nargs"]
            given[p["name"]] = _convert(p, positional[0]) if p["nargs"] == 1 else \
                [_convert(p, v) for v in positional[:p["nargs"]]]
            positional = positional[p["nargs"]:]
    if positional:
        raise _NotSure  # an extra argument: Typer's error


def _final(p: dict[str, Any], given: dict[str, Any]) -> Any:
    if p["name"] in given:
        return given[p["name"]]
    if p["envvar"]:
        text = os.environ.get(p["envvar"])
        if text:
            if p["multiple"] or p["nargs"] != 1 or p["flag"] or p["type"] != "str":
                raise _NotSure
            return text
    if p["required"]:
        raise _NotSure
    return p["default"]


# -- the spec, from the live Typer command ---------------------------------------------------------------
def build_spec() -> dict[str, Any]:
    """What Typer builds for the hot commands, as hot_spec.json holds it."""
    import typer.main

    from klog.cli import app as cli_app

    group = typer.main.get_command(cli_app.app_with({"consume", "produce"}))
    spec: dict[str, Any] = {}
    for name in COMMANDS:
        cmd = group.commands[name]
        params = []
        for p in cmd.params:
            if p.callback is not None or p.is_eager or getattr(p, "count", False) or p.secondary_opts:
                raise AssertionError(f"klog {name}: {p.name} needs Typer's own handling; teach klog.cli.hot")
            bare = p.bare_type()
            kind = bare[5:-1] if bare.startswith("list[") else bare
            params.append({"name": p.name, "kind": p.param_type_name, "opts": list(p.opts),
                           "flag": bool(getattr(p, "is_flag", False)), "multiple": p.multiple, "nargs": p.nargs,
                           "type": kind, "envvar": p.envvar, "default": p.default, "required": p.required})
        spec[name] = {"has_x": any(p["name"] == "prop" for p in params), "params": params}
    return spec


def spec_text() -> str:
    return json.dumps(build_spec(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    with open(SPEC_FILE, "w", encoding="utf-8") as out:
        out.write(spec_text())
    print(f"wrote {os.path.relpath(SPEC_FILE)}")
