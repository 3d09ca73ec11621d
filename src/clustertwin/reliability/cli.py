"""`clustertwin goodput`: the shared job flags (cli_options) plus tokens, failures, checkpoints and stragglers."""
from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional

import typer

from .. import cli_options as opts
from ..errors import PlanError, SpecError
from ..jobs import JobOptions


def _parse_rates(items: list[str] | None) -> dict[str, float] | None:
    if not items:
        return None
    out: dict[str, float] = {}
    for raw in items:
        for item in str(raw).split(","):
            item = item.strip()
            if not item:
                continue
            if "=" not in item:
                raise SpecError("failure_rate", f"cannot read {item!r}", "write CLASS=RATE, e.g. --failure-rate gpu=1.2e-5")
            key, value = (s.strip() for s in item.split("=", 1))
            try:
                rate = float(value)
            except ValueError:
                raise SpecError(f"failure_rate.{key}", f"{value!r} is not a number",
                                "give failures per unit-hour, e.g. gpu=1.2e-5") from None
            out[key] = rate
    return out or None


# ---- the failure/checkpoint options goodput and report share ------------------------------------
CheckpointIntervalOpt = typer.Option("auto", "--checkpoint-interval",
                                     help="auto (the goodput-optimal interval) or a duration, e.g. 30min")
MtbfOpt = typer.Option(None, "--mtbf", help="job MTBF of unplanned failures, e.g. 3h (keeps the model's mix)")
FailureModelOpt = typer.Option("llama3", "--failure-model",
                               help="llama3 | kokolis-rsc1 | kokolis-rsc2 | opt-175b | a YAML file")
FailureRateOpt = typer.Option(None, "--failure-rate", help="CLASS=RATE per unit-hour, e.g. gpu=1.2e-5 (repeatable)")
NoPlannedOpt = typer.Option(False, "--no-planned", help="leave out planned interruptions")
CheckpointModeOpt = typer.Option("sync", "--checkpoint-mode", help="sync | async | in-memory")
CheckpointWritersOpt = typer.Option("all", "--checkpoint-writers",
                                    help="all (fully parallel save) | dp-rank-0 (Megatron legacy format)")
StorageBandwidthOpt = typer.Option(None, "--storage-bandwidth",
                                   help="aggregate storage bandwidth, e.g. 2TB/s [default 2TB/s]")
NodeStorageBandwidthOpt = typer.Option(None, "--node-storage-bandwidth",
                                       help="per-node path to storage, e.g. 400Gbps [default 50GB/s]")
HotSparesOpt = typer.Option(None, "--hot-spares", help="idle nodes ready to replace failed ones")
NoStragglersOpt = typer.Option(False, "--no-stragglers", help="leave out per-GPU speed variation")


def goodput_options(*, failure_model, mtbf, failure_rate, no_planned, checkpoint_interval, checkpoint_mode,
                    checkpoint_writers, storage_bandwidth, node_storage_bandwidth, hot_spares, no_stragglers,
                    **extra) -> dict:
    """The keyword options of estimate_goodput from the shared command-line options (checked)."""
    if hot_spares is not None and hot_spares < 0:
        raise SpecError("hot_spares", f"{hot_spares} must be non-negative", "give a number of idle nodes, e.g. 2")
    return dict(failure_model=failure_model, mtbf_s=mtbf, failure_rates=_parse_rates(failure_rate),
                planned_interruptions=not no_planned, checkpoint_interval_s=checkpoint_interval,
                checkpoint_mode=checkpoint_mode.strip().lower(), checkpoint_writers=checkpoint_writers.strip().lower(),
                storage_write_bandwidth_bytes_per_s=storage_bandwidth,
                storage_read_bandwidth_bytes_per_s=storage_bandwidth,
                node_storage_bandwidth_bytes_per_s=node_storage_bandwidth, hot_spares=hot_spares,
                stragglers=not no_stragglers, **extra)


def register(app: typer.Typer) -> None:
    from .. import cli as base

    @app.command()
    @opts.job_options(profile=True)
    def goodput(job: JobOptions, profile: Optional[Path],
                tokens: str = typer.Option(..., "--tokens", help='tokens to train, e.g. 15T or 1.5e12'),
                checkpoint_interval: str = CheckpointIntervalOpt, mtbf: Optional[str] = MtbfOpt,
                failure_model: str = FailureModelOpt, failure_rate: Optional[List[str]] = FailureRateOpt,
                no_planned: bool = NoPlannedOpt, checkpoint_mode: str = CheckpointModeOpt,
                checkpoint_writers: str = CheckpointWritersOpt, storage_bandwidth: Optional[str] = StorageBandwidthOpt,
                node_storage_bandwidth: Optional[str] = NodeStorageBandwidthOpt,
                hot_spares: Optional[int] = HotSparesOpt, no_stragglers: bool = NoStragglersOpt,
                straggler_cv: Optional[float] = typer.Option(None, "--straggler-cv",
                                                             help="per-GPU speed variation, std/mean [default 0.01]"),
                thermal_slowdown: Optional[float] = typer.Option(None, "--thermal-slowdown",
                                                                 help="hottest GPU of a node this much slower [default 0.015]"),
                monte_carlo: int = typer.Option(0, "--monte-carlo", help="also simulate N runs (confidence interval)"),
                seed: int = typer.Option(0, "--seed", help="random seed of the Monte Carlo runs"),
                as_json: bool = typer.Option(False, "--json", help="print JSON (schema 1)")) -> None:
        """Expected time-to-train and goodput of a plan under failures, checkpoints, restarts and stragglers."""
        from ..jobs import job_from_options
        from ..predict import predict_job
        from ..report.console import goodput_tables, print_all
        from .goodput import MAX_MONTE_CARLO_RUNS, estimate_goodput
        if monte_carlo < 0 or monte_carlo > MAX_MONTE_CARLO_RUNS:
            raise SpecError("monte_carlo", f"{monte_carlo} runs is out of range", f"give 1 to {MAX_MONTE_CARLO_RUNS:,} (0 = off)")
        if seed < 0:
            raise SpecError("seed", f"{seed} must be non-negative", "e.g. --seed 0")
        for name, value in (("straggler_cv", straggler_cv), ("thermal_slowdown", thermal_slowdown)):
            if value is not None and not (0.0 <= value <= 0.5):
                raise SpecError(name, f"{value} is out of range", "give a fraction from 0 to 0.5, e.g. 0.01")
        options = goodput_options(failure_model=failure_model, mtbf=mtbf, failure_rate=failure_rate,
                                  no_planned=no_planned, checkpoint_interval=checkpoint_interval,
                                  checkpoint_mode=checkpoint_mode, checkpoint_writers=checkpoint_writers,
                                  storage_bandwidth=storage_bandwidth, node_storage_bandwidth=node_storage_bandwidth,
                                  hot_spares=hot_spares, no_stragglers=no_stragglers, gpu_speed_cv=straggler_cv,
                                  thermal_slowdown=thermal_slowdown, monte_carlo_runs=monte_carlo, seed=seed)
        pred = predict_job(job_from_options(job), profile)
        if not pred.fits:   # a time to train for a run that cannot start is a wrong answer, not a pessimistic one
            raise PlanError("plan", f"does not fit: {pred.memory.total_bytes / 2**30:,.1f} GiB of "
                            f"{pred.memory.capacity_bytes / 2**30:,.0f} GiB per GPU (stage {pred.memory.critical_stage})",
                            "choose a plan that fits (recompute, a higher zero stage, more tp or pp; "
                            "`clustertwin search` finds one), then ask for its goodput")
        est = estimate_goodput(pred, tokens, **options)
        if not est.feasible:
            raise SpecError("goodput", f"the run never finishes: failures every {_dur(est.mtbf_s)} against a "
                            f"{_dur(est.restart.mean_s)} restart and {_dur(est.checkpoint.blocking_s)} checkpoints",
                            "raise --mtbf, add --hot-spares or use --checkpoint-mode async")
        if as_json:
            base._emit_json(est.to_json())
            return
        print_all(base.console, goodput_tables(pred, est))


def _dur(seconds: float) -> str:
    from ..units import format_duration
    return format_duration(seconds) if math.isfinite(seconds) else "never"
