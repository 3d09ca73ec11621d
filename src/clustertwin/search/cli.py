"""`clustertwin search` and `clustertwin sweep`."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from ..cli_options import job_options
from ..errors import SpecError
from ..jobs import JobOptions
from ..progress import progress_bar, shows_progress
from ..units import parse_quantity
from .tuner import OBJECTIVES

console = Console()


def parse_tokens(text: Optional[str]) -> Optional[float]:
    if text is None:
        return None
    tokens = parse_quantity(text, "count", "tokens")
    if tokens <= 0:
        raise SpecError("tokens", f"{text!r} must be a positive number of tokens", 'e.g. --tokens 15T')
    return tokens


SEARCH_PLAN_HELP = ('plan fields held fixed, the rest searched (like --fix), e.g. "tp=8,pp=4"; '
                    "gb= in it is the global batch")


def register(app: typer.Typer) -> None:

    @app.command("search")
    @job_options(plan_help=SEARCH_PLAN_HELP)
    def search_cmd(
            job: JobOptions,
            top: int = typer.Option(10, "--top", help="plans to show"),
            objective: str = typer.Option("time", "--objective", help=" | ".join(OBJECTIVES)),
            max_memory_fraction: float = typer.Option(1.0, "--max-memory-fraction",
                                                      help="share of each GPU's memory a plan may use"),
            fix: Optional[str] = typer.Option(None, "--fix", help='plan fields held fixed, e.g. "tp=8,recompute=full"'),
            tokens: Optional[str] = typer.Option(None, "--tokens", help='tokens to train, e.g. 15T (goodput, cost)'),
            gpu_hour_price: Optional[float] = typer.Option(None, "--gpu-hour-price",
                                                           help="USD per GPU-hour (needed by --objective cost)"),
            pareto_points: int = typer.Option(3, "--pareto-points",
                                              help="GPU counts in the Pareto view: N, N/2, ... (1: none)"),
            policy: Optional[str] = typer.Option(None, "--policy",
                                                 help="resilience policy the goodput objective prices (goodput "
                                                      "--policy), or best: plan and policy chosen together"),
            as_json: bool = typer.Option(False, "--json", help="print JSON (schema 1)"),
            quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar (it shows on stderr, "
                                                                   "and only on a terminal)")) -> None:
        """Find the best parallel plans: every valid plan enumerated, what cannot run pruned, the rest ranked.
        The job options are predict's; without them, the default job (Llama 3 8B on 64 H100s, global
        batch 256, sequence 8192)."""
        from ..jobs import search_inputs
        from ..report.console import print_all, search_tables
        from .tuner import search
        inputs = search_inputs(job)
        goodput_options = None
        if policy is not None:
            from ..errors import SpecError
            if objective != "goodput":
                raise SpecError("policy", "--policy prices the goodput objective", "add --objective goodput")
            if policy.strip().lower() != "best":
                from ..reliability.policies import parse_policy
                parse_policy(policy)       # an unknown policy: one line before any pricing
            goodput_options = {"policy": policy}
        with progress_bar("pricing plans", quiet=quiet) as update:
            r = search(inputs.model, **inputs.search_kwargs(fix), max_memory_fraction=max_memory_fraction, top=top,
                       objective=objective, tokens=parse_tokens(tokens), gpu_hour_price=gpu_hour_price,
                       pareto_points=pareto_points, progress=update, goodput_options=goodput_options)
        if as_json:
            sys.stdout.write(json.dumps(r.to_json(), indent=2, default=float) + "\n")
            return
        print_all(console, search_tables(r))

    @app.command("sweep")
    def sweep_cmd(
            spec: Path = typer.Argument(..., help="YAML: models x clusters x batch sizes x objectives"),
            output: Optional[Path] = typer.Option(None, "--output", "-o",
                                                  help="directory of Parquet parts [default: the spec's output, "
                                                       "else SPEC.parquet/]"),
            executor: str = typer.Option("local", "--executor", help="local (processes) | ray"),
            workers: Optional[int] = typer.Option(None, "--workers", help="local processes [default: CPUs]"),
            ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Ray cluster to join [default: local]"),
            as_json: bool = typer.Option(False, "--json", help="print a JSON summary"),
            quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar")) -> None:
        """Run a grid of searches; restartable: finished cells are never redone nor duplicated."""
        from .sweep import load_spec, run_sweep
        sw = load_spec(spec)
        summary = run_sweep(sw, output, executor=executor, workers=workers, ray_address=ray_address,
                            progress=shows_progress(quiet))
        if as_json:
            sys.stdout.write(json.dumps(summary.to_json(), indent=2) + "\n")
            return
        console.print(summary.describe())
