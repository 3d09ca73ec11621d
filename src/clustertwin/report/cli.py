"""`clustertwin report`: one self-contained HTML page (plotly) of a plan, and its data as JSON."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, List, Optional

import typer

from rich.console import Console

from .. import cli_options as opts
from ..errors import SpecError
from ..jobs import JobOptions
from ..progress import shows_progress
from ..reliability import cli as rc

err_console = Console(stderr=True)


@contextmanager
def _progress(quiet: bool) -> Iterator[tuple[Callable[[str], None], Callable[[int, int], None]]]:
    """Bars on a terminal's stderr: the report's steps, and the plans the search and the landscape
    have priced (count, time left); nothing with --quiet or when stderr is not a terminal."""
    from .data import STEPS
    if not shows_progress(quiet, err_console):
        yield (lambda name: None), (lambda done, total: None)
        return
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)
    with Progress(SpinnerColumn(), TextColumn("{task.description:<18}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("· left"), TimeRemainingColumn(), console=err_console,
                  transient=True) as bar:
        task = bar.add_task("report: start", total=len(STEPS) + 1)
        plans = bar.add_task("plans priced", total=None, visible=False)

        def step(name: str) -> None:
            bar.update(task, completed=STEPS.index(name), description=f"report: {name}")
            bar.reset(plans, total=None, visible=False)

        def priced(done: int, total: int) -> None:
            bar.update(plans, completed=done, total=total, visible=True)
        yield step, priced
        bar.update(task, completed=len(STEPS), description="report: page")


def register(app: typer.Typer) -> None:
    from .. import cli as base

    @app.command("report")
    @opts.job_options(plan_help='the plan to report [default: the search\'s best], e.g. "tp=8,pp=4,sp=1"')
    def report_cmd(
            job: JobOptions,
            # search
            no_search: bool = typer.Option(False, "--no-search", help="leave out the search landscape (needs --plan)"),
            top: int = typer.Option(10, "--top", help="best plans marked in the landscape"),
            objective: str = typer.Option("time", "--objective", help="time | cost | goodput"),
            fix: Optional[str] = typer.Option(None, "--fix", help='plan fields held fixed in the search, e.g. "tp=8"'),
            max_memory_fraction: float = typer.Option(1.0, "--max-memory-fraction",
                                                      help="share of each GPU's memory a plan may use"),
            pareto_points: int = typer.Option(3, "--pareto-points", help="GPU counts in the Pareto view: N, N/2, ..."),
            gpu_hour_price: Optional[float] = typer.Option(None, "--gpu-hour-price", help="USD per GPU-hour (cost)"),
            sample: int = typer.Option(20_000, "--sample", help="feasible plans scattered in the landscape (at most)"),
            seed: int = typer.Option(0, "--seed", help="random seed of the landscape's sample"),
            # goodput
            tokens: Optional[str] = typer.Option(None, "--tokens",
                                                 help="tokens to train, e.g. 15T [default: 20 per parameter]"),
            checkpoint_interval: str = rc.CheckpointIntervalOpt, mtbf: Optional[str] = rc.MtbfOpt,
            failure_model: str = rc.FailureModelOpt, failure_rate: Optional[List[str]] = rc.FailureRateOpt,
            no_planned: bool = rc.NoPlannedOpt, checkpoint_mode: str = rc.CheckpointModeOpt,
            checkpoint_writers: str = rc.CheckpointWritersOpt, storage_bandwidth: Optional[str] = rc.StorageBandwidthOpt,
            node_storage_bandwidth: Optional[str] = rc.NodeStorageBandwidthOpt,
            hot_spares: Optional[int] = rc.HotSparesOpt,
            # output
            out: Path = typer.Option(Path("report.html"), "--out", "-o", help="the HTML page to write"),
            json_out: Optional[Path] = typer.Option(None, "--json", help="also write the page's data as JSON (- for stdout)"),
            quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar")) -> None:
        """One self-contained HTML page of a plan: step-time breakdown, memory against HBM, the search
        landscape, goodput against checkpoint interval and a pipeline timeline."""
        from .data import build_report, dumps, write_text
        from .views import render_html, require_plotly
        require_plotly()  # before any work: a missing extra is one line
        if str(out) == "-":
            raise SpecError("out", "the page goes to a file", "give a file name, e.g. --out report.html")
        options = rc.goodput_options(failure_model=failure_model, mtbf=mtbf, failure_rate=failure_rate,
                                     no_planned=no_planned, checkpoint_interval=checkpoint_interval,
                                     checkpoint_mode=checkpoint_mode, checkpoint_writers=checkpoint_writers,
                                     storage_bandwidth=storage_bandwidth, node_storage_bandwidth=node_storage_bandwidth,
                                     hot_spares=hot_spares, stragglers=job.stragglers)
        with _progress(quiet) as (step, priced):
            data = build_report(**job.as_kwargs(), tokens=tokens, goodput_options=options,
                                search=not no_search, top=top, objective=objective, fix=fix,
                                max_memory_fraction=max_memory_fraction, pareto_points=pareto_points,
                                gpu_hour_price=gpu_hour_price, sample=sample, seed=seed, on_step=step,
                                on_progress=priced)
            page = render_html(data)
        path = write_text(out, page, "out")
        if json_out is not None:
            if str(json_out) == "-":
                sys.stdout.write(dumps(data))
            else:
                write_text(json_out, dumps(data), "json")
        if json_out is not None and str(json_out) == "-":
            return
        j, s = data["job"], data["summary"]
        good = f" · goodput {s['goodput'] * 100:.1f}%" if s.get("goodput") is not None else ""
        base.console.print(f"wrote {path} ({len(page.encode()) / 1e6:.1f} MB): {j['model']} on {j['num_gpus']:,} x "
                           f"{j['gpu']} · {j['plan_text']} · step {s['step_time_s']:.3g} s · MFU {s['mfu'] * 100:.1f}%"
                           + ("" if s.get("fits", True) else " · does NOT fit in GPU memory") + good + (f"; data in {json_out}" if json_out is not None else ""), highlight=False,
                           soft_wrap=True)
