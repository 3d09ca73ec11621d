"""Progress of long work (search, sweep, report) on the terminal's stderr: counts done of the total,
elapsed time and the time left. Never on stdout (its tables and JSON stay clean), and nothing at all
with ``quiet`` or when stderr is not a terminal (a pipe, a file, a CI log).

>>> with progress_bar("plans", quiet=True) as update:
...     update(5, 10)
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

from rich.console import Console

Update = Callable[[int, int], None]   # (done, total)


def stderr_console() -> Console:
    return Console(stderr=True)


def shows_progress(quiet: bool = False, console: Console | None = None) -> bool:
    """Whether progress is shown: not ``quiet`` and stderr a terminal."""
    return not quiet and (console or stderr_console()).is_terminal


@contextmanager
def progress_bar(label: str, *, unit: str = "", quiet: bool = False,
                 console: Console | None = None) -> Iterator[Update]:
    """A bar on stderr while the block runs; yields ``update(done, total)``. The bar goes when the
    block ends (transient), so only the command's output stays."""
    err = console or stderr_console()
    if not shows_progress(quiet, err):
        yield lambda done, total: None
        return
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
    if unit:
        columns.append(TextColumn(unit))
    columns += [TextColumn("·"), TimeElapsedColumn(), TextColumn("· left"), TimeRemainingColumn()]
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)
        yield update


__all__ = ["progress_bar", "shows_progress", "stderr_console", "Update"]
