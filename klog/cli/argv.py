"""Options that apply to every command may come before it: `klog --data-dir X topics list` is
`klog topics list --data-dir X`. Only argv is rearranged (no Typer here: the hot path uses it too)."""

from __future__ import annotations

# the options each command that talks to a store or a cluster takes, and whether they take a value
GLOBAL_OPTIONS = {"--data-dir": True, "-d": True, "--bootstrap-server": True, "-b": True, "--cluster": True,
                  "--property": True, "-X": True}
# the commands that are groups of subcommands (tests/cli/test_first_hour.py keeps this the CLI's list)
GROUPS = {"topics", "dirs", "groups", "spark", "clusters", "users", "acls", "quotas", "transactions", "connect"}


def _split_option(arg: str) -> tuple[str, bool] | None:
    """(option name, whether its value is inside arg) for a global option, else None."""
    if arg.startswith("--"):
        name = arg.partition("=")[0]
        return (name, "=" in arg) if name in GLOBAL_OPTIONS else None
    if len(arg) >= 2 and arg[:2] in GLOBAL_OPTIONS:
        return arg[:2], len(arg) > 2
    return None


def move_global_options(args: list[str]) -> list[str]:
    """`args` with the global options given before the command moved after it (after a group's
    subcommand). Anything else before the command (--help, --version, an unknown option) leaves
    `args` as they are, for Typer to answer."""
    moved: list[str] = []
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        found = _split_option(args[i])
        if found is None:
            return args
        name, inline = found
        width = 1 if inline or not GLOBAL_OPTIONS[name] else 2
        if i + width > len(args):
            return args
        moved += args[i:i + width]
        i += width
    if not moved or i >= len(args):
        return args
    path = [args[i]]
    if args[i] in GROUPS:
        if i + 1 >= len(args) or args[i + 1].startswith("-"):
            return args
        path.append(args[i + 1])
    rest = args[i + len(path):]
    return [*path, *moved, *rest]


def delimiter_option(text: str, option: str) -> bytes:
    """A delimiter option's text (-K, -D) with backslash escapes (\\t \\0 \\xNN ...) as bytes: produce's
    and consume's read it the same way; a UsageError naming `option`."""
    from klog.client.ingest import parse_delimiter
    from klog.errors import UsageError

    try:
        return parse_delimiter(text)
    except UsageError:
        raise UsageError(f"invalid {option} '{text}': give a delimiter (escapes \\t \\0 \\xNN ...)") from None
