"""`klog groups`: registered by app.py; filled in by its issue."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the `groups` command(s) to the root app (nothing yet)."""
