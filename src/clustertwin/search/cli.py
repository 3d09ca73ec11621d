"""`clustertwin search` and `clustertwin sweep`."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from ..errors import SpecError
from ..units import format_duration, parse_quantity
from .space import PRUNE_REASONS
from .tuner import OBJECTIVES, SearchResult, search

console = Console()


def _count(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:,.0f}"


def _gib(x: float) -> str:
    return f"{x / 2**30:,.1f} GiB"


def parse_tokens(text: Optional[str]) -> Optional[float]:
    if text is None:
        return None
    tokens = parse_quantity(text, "count", "tokens")
    if tokens <= 0:
        raise SpecError("tokens", f"{text!r} must be a positive number of tokens", 'e.g. --tokens 15T')
    return tokens


def print_result(r: SearchResult, con: Console = console) -> None:
    s = r.space
    con.print(f"[bold]{s.model.name}[/bold] on {s.num_gpus:,} x {s.cluster.gpu.name} · seq {s.seq_len} · "
              f"global batch {s.global_batch} · {s.precision} · {s.framework} · objective {r.objective}"
              + (f" · fixed {', '.join(f'{k}={v}' for k, v in s.fixed.items())}" if s.fixed else ""))
    con.print(f"evaluated {r.evaluated:,} plans in {r.elapsed_s:.2f} s ({_count(r.plans_per_s)} plans/s); "
              f"{r.feasible:,} fit in {s.max_memory_fraction * 100:.0f}% of {_gib(s.cluster.gpu.hbm_bytes)}; "
              f"{r.shape_classes:,} shape classes priced")
    if r.pruned:
        con.print("pruned: " + " · ".join(f"{PRUNE_REASONS.get(k, k)} {_count(v)}"
                                          for k, v in sorted(r.pruned.items(), key=lambda kv: -kv[1])))
    t = Table(title=f"best {len(r.plans)} by {r.objective}", title_justify="left")
    for col, just in (("#", "right"), ("plan", "left"), ("GPUs", "right"), ("step", "right"), ("MFU", "right"),
                      ("memory/GPU", "right")):
        t.add_column(col, justify=just, overflow="fold")  # type: ignore[arg-type]
    extra = []
    if any(p.time_to_train_s is not None for p in r.plans):
        extra.append(("time to train", lambda p: format_duration(p.time_to_train_s)))
    if any(p.goodput is not None for p in r.plans):
        extra.append(("goodput", lambda p: f"{p.goodput * 100:.1f}%"))
    if any(p.cost_usd is not None for p in r.plans):
        extra.append(("cost", lambda p: f"${p.cost_usd:,.0f}" if p.cost_usd >= 100 else f"${p.cost_usd:,.2f}"))
    for name, _ in extra:
        t.add_column(name, justify="right")
    t.add_column("bottleneck", overflow="fold")
    from .tuner import plan_text
    for p in r.plans:
        pred = p.prediction
        t.add_row(str(p.rank), plan_text(pred), f"{p.num_gpus:,}", format_duration(pred.step_time_s),
                  f"{pred.mfu * 100:.1f}%",
                  f"{_gib(pred.memory.total_bytes)} ({pred.memory.total_bytes / pred.memory.capacity_bytes * 100:.0f}%)",
                  *[f(p) for _, f in extra], p.bottleneck)
    con.print(t)
    if len(r.pareto) > 1:
        price = r.gpu_hour_price
        pt = Table(title="Pareto: step time against GPUs (GPU-hours per step is the cost at any price)",
                   title_justify="left")
        for col in ("GPUs", "best plan", "step", "GPU-h/step") + (("cost/step",) if price else ()) + ("MFU", "front"):
            pt.add_column(col, justify="left" if col == "best plan" else "right", overflow="fold")
        for q in r.pareto:
            if q.plan is None:
                pt.add_row(f"{q.num_gpus:,}", "nothing fits", "", "", *([""] if price else []), "", "")
                continue
            pred = q.plan.prediction
            cells = [f"{q.num_gpus:,}", plan_text(pred), format_duration(pred.step_time_s),
                     f"{q.gpu_hours_per_step:,.3g}"]
            if price:
                cells.append(f"${q.gpu_hours_per_step * price:,.2f}")  # type: ignore[operator]
            cells += [f"{pred.mfu * 100:.1f}%", "yes" if q.on_front else "no"]
            pt.add_row(*cells)
        con.print(pt)


def _busy(text: str, quiet: bool):
    """A spinner on a terminal's stderr while a search runs (it reports no finer progress)."""
    from contextlib import nullcontext
    err = Console(stderr=True)
    if quiet or not err.is_terminal:
        return nullcontext()
    return err.status(text)


def register(app: typer.Typer) -> None:
    from ..cli_options import ClusterOpt, GpnOpt, GpuOpt, NumGpusOpt

    @app.command("search")
    def search_cmd(
            model: str = typer.Option(..., "--model", "-m", help="catalog name or a YAML/JSON/HF config.json file"),
            gpu: Optional[str] = GpuOpt, num_gpus: Optional[int] = NumGpusOpt, gpus_per_node: Optional[int] = GpnOpt,
            cluster: Optional[str] = ClusterOpt,
            global_batch: int = typer.Option(..., "--global-batch", help="sequences per iteration"),
            seq_len: Optional[int] = typer.Option(None, "--seq-len", help="tokens per sequence [default: the model's, at most 8192]"),
            precision: str = typer.Option("bf16", "--precision", help="bf16 | fp16 | fp8 | fp32"),
            framework: str = typer.Option("megatron", "--framework", help="megatron | nemo | torchtitan | deepspeed | ..."),
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
            as_json: bool = typer.Option(False, "--json", help="print JSON (schema 1)"),
            quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress indicator")) -> None:
        """Find the best parallel plans: every valid plan enumerated, what cannot run pruned, the rest ranked."""
        with _busy("searching plans", quiet or as_json):
            r = search(model, gpu=gpu, num_gpus=num_gpus, cluster=cluster, gpus_per_node=gpus_per_node,
                       global_batch=global_batch, seq_len=seq_len, precision=precision, framework=framework,
                       fix=fix, max_memory_fraction=max_memory_fraction, top=top, objective=objective,
                       tokens=parse_tokens(tokens), gpu_hour_price=gpu_hour_price, pareto_points=pareto_points)
        if as_json:
            sys.stdout.write(json.dumps(r.to_json(), indent=2, default=float) + "\n")
            return
        print_result(r)

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
                            progress=not (as_json or quiet))
        if as_json:
            sys.stdout.write(json.dumps(summary.to_json(), indent=2) + "\n")
            return
        console.print(summary.describe())
