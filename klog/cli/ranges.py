"""The range options consume and replay share: one definition of each (klog.client.timespec.parse_range reads them)."""

from __future__ import annotations

from typing import Annotated

import typer

OffsetOpt = Annotated[str | None, typer.Option("--offset", "-o",
                                               help="beginning | end | N | -N (N back from the end).")]
SinceOpt = Annotated[str | None, typer.Option("--since", help="Start at a time: ISO, epoch ms, 15m ago.")]
UntilOpt = Annotated[str | None, typer.Option("--until", help="Stop before this time.")]
TailOpt = Annotated[int | None, typer.Option("--tail", help="Last N records of each partition.")]
CountOpt = Annotated[int | None, typer.Option("--count", "-n", "-c",
                                              help="Stop after N records in all (-c as in kcat).")]
PartitionOpt = Annotated[list[int] | None, typer.Option("--partition", "-p", help="Only this partition.")]
