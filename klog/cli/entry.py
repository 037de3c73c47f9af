"""The `klog` console script: a completion request (a Tab) is answered by klog.cli.complete without
importing Typer or rich; everything else runs the CLI (klog.cli.app)."""

from __future__ import annotations

import os
import sys


def main() -> None:
    from klog.cli.session import guard_standard_streams

    guard_standard_streams()
    if os.environ.get("_KLOG_COMPLETE"):
        try:
            from klog.cli.complete import complete

            code = complete()
        except Exception:  # noqa: BLE001 - a fast-path bug must not break Tab: Typer answers instead
            code = None
        if code is not None:
            sys.exit(code)
    from klog.cli.hot import main_hot

    main_hot()  # consume and produce, without building Typer's command; returns for everything else
    from klog.cli.app import main as run_cli

    run_cli()
