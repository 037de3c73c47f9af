"""`klog replay`: registered by app.py; filled in by its issue."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the `replay` command(s) to the root app (nothing yet)."""
