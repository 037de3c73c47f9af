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


def option_placeholder(param: Any) -> str | None:
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return None
    long = max(param.opts, key=len)
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
    from typer.core import TyperArgument, TyperOption

    if getattr(TyperOption, "_klog_placeholders", False):
        return
    shown_type = TyperOption.display_type_rich

    def display_type_rich(self, ctx):  # noqa: ANN001, ANN202
        if self.metavar is not None:
            return shown_type(self, ctx)
        name = option_placeholder(self)
        return None if name is None else name + ("..." if self.nargs != 1 else "")

    def argument_name(self) -> str:  # noqa: ANN001
        return self.metavar if self.metavar is not None else self.name.upper()

    def usage_name(self) -> str:  # noqa: ANN001
        name = self.display_name_raw
        name = name if self.required else f"[{name}]"
        return name + ("..." if self.nargs != 1 else "")

    TyperOption.display_type_rich = display_type_rich
    TyperArgument.display_name_raw = property(argument_name)
    TyperArgument._usage_display_name = usage_name
    TyperArgument.display_type_rich = lambda self, ctx: None  # the name says it: TOPIC, FILES...
    TyperOption._klog_placeholders = True
