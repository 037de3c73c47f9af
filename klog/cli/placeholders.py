"""Readable placeholders in help, usage lines and man pages: `-p N`, `--since TIME`, `TOPIC`, where
Typer shows Python types (`<list[int]>`, `<str>`, `<bool>`) and braces (`{topic}`).

Typer 0.29 has no setting for this, so its two display hooks are replaced here, once, for klog's CLI
(an explicit metavar= on an option still wins)."""

from __future__ import annotations

from typing import Any

# option -> placeholder, where the name alone does not say it
BY_OPTION = {
    "--data-dir": "DIR", "--since": "TIME", "--until": "TIME", "--before": "OFFSET|TIME", "--time": "TIME",
    "--pattern": "REGEX", "--grep": "REGEX", "--grep-key": "REGEX", "--grep-header": "REGEX",
    "--header": "K=V", "--config": "NAME=VALUE", "--property": "NAME=VALUE", "--conf": "NAME=VALUE",
    "--source-property": "NAME=VALUE", "--dest-property": "NAME=VALUE", "--delete-config": "NAME",
    "--key-separator": "SEP", "--delimiter": "DELIM", "--input": "lines|json|raw", "--acks": "all|1|0",
    "--compression": "CODEC", "--exec": "CMD", "--group": "GROUP", "--topic": "TOPIC", "--to-topic": "TOPIC",
    "--offset": "OFFSET", "--format": "FORMAT", "--out": "PATH", "--bootstrap-server": "HOST:PORT",
    "--listen": "HOST:PORT", "--advertised-listener": "HOST:PORT", "--master": "URL", "--speed": "FACTOR",
    "--rate": "N", "--checkpoint": "DIR", "--script": "FILE", "--schema": "DDL",
}
# command -> option -> placeholder, where one command's option takes something else than BY_OPTION says
BY_COMMAND = {
    "produce": {"--schema": "FILE|id:N|latest"},
}


def option_placeholder(param: Any, command: str | None = None) -> str | None:
    """The placeholder of `param` in the help of `command` (its name, as ctx.info_name gives it)."""
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return None
    long = max(param.opts, key=len)
    if long in BY_COMMAND.get(command or "", {}):
        return BY_COMMAND[command or ""][long]
    if long in BY_OPTION:
        return BY_OPTION[long]
    try:
        kind = param.bare_type()  # Typer's: "int", "list[int]", "str", ...
    except Exception:  # noqa: BLE001 - another Typer: the name alone
        kind = ""
    if kind.replace("list[", "").rstrip("]") in ("int", "float"):
        return "N"
    return long.lstrip("-").upper()


def apply() -> None:
    from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

    if getattr(TyperOption, "_klog_placeholders", False):
        return
    shown_type = TyperOption.display_type_rich

    def display_type_rich(self, ctx):  # noqa: ANN001, ANN202
        if self.metavar is not None:
            return shown_type(self, ctx)
        name = option_placeholder(self, getattr(ctx, "info_name", None))
        return None if name is None else name + ("..." if self.nargs != 1 else "")

    def argument_name(self) -> str:  # noqa: ANN001
        return self.metavar if self.metavar is not None else self.name.upper()

    def usage_name(self) -> str:  # noqa: ANN001
        name = self.display_name_raw
        name = name if self.required else f"[{name}]"
        return name + ("..." if self.nargs != 1 else "")

    for cls in (TyperCommand, TyperGroup):
        cls.format_help = _plain_brackets(cls.format_help)
    TyperOption.display_type_rich = display_type_rich
    TyperArgument.display_name_raw = property(argument_name)
    TyperArgument._usage_display_name = usage_name
    TyperArgument.display_type_rich = lambda self, ctx: None  # the name says it: TOPIC, FILES...
    TyperOption._klog_placeholders = True


def _plain_brackets(format_help: Any) -> Any:
    """`format_help` with help texts shown as written: Rich read "[key=|value=]FILE" as a markup tag and
    dropped it (klog's help uses no markup), so while a page is drawn its texts are Rich-escaped."""
    def wrapped(self, ctx, formatter):  # noqa: ANN001, ANN202
        if getattr(self, "rich_markup_mode", None) != "rich":
            return format_help(self, ctx, formatter)
        from rich.markup import escape

        texts = [(p, p.help) for p in self.params if getattr(p, "help", None)]
        own = self.help
        try:
            for p, text in texts:
                p.help = escape(text)
            if own:
                self.help = escape(own)
            return format_help(self, ctx, formatter)
        finally:
            for p, text in texts:
                p.help = text
            self.help = own

    return wrapped
