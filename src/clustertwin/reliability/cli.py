"""`clustertwin goodput`: the predict flags plus tokens, failures, checkpoints and stragglers."""
from __future__ import annotations

import math
from typing import List, Optional

import typer

from .. import cli_options as opts

from ..errors import SpecError


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
    def goodput(model: Optional[str] = opts.ModelOpt, gpu: Optional[str] = opts.GpuOpt,
                num_gpus: Optional[int] = opts.NumGpusOpt, gpus_per_node: Optional[int] = opts.GpnOpt,
                cluster: Optional[str] = opts.ClusterOpt,
                plan: Optional[str] = opts.PlanOpt, micro_batch: Optional[int] = opts.MicroBatchOpt,
                global_batch: Optional[int] = opts.GlobalBatchOpt, seq_len: Optional[int] = opts.SeqLenOpt,
                precision: Optional[str] = opts.PrecisionOpt, framework: str = opts.FrameworkOpt,
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
        from ..predict import predict_cli_job
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
        pred = predict_cli_job(model, gpu=gpu, num_gpus=num_gpus, cluster=cluster, gpus_per_node=gpus_per_node,
                               plan=plan, micro_batch=micro_batch, global_batch=global_batch, seq_len=seq_len,
                               precision=precision, framework=framework)
        est = estimate_goodput(pred, tokens, **options)
        if not est.feasible:
            raise SpecError("goodput", f"the run never finishes: failures every {_dur(est.mtbf_s)} against a "
                            f"{_dur(est.restart.mean_s)} restart and {_dur(est.checkpoint.blocking_s)} checkpoints",
                            "raise --mtbf, add --hot-spares or use --checkpoint-mode async")
        if as_json:
            base._emit_json(est.to_json())
            return
        base.console.print(_header(pred, est))
        for table in goodput_tables(pred, est):
            base.console.print(table)


def _dur(seconds: float) -> str:
    from ..units import format_duration
    return format_duration(seconds) if math.isfinite(seconds) else "never"


def _header(pred, est) -> str:
    job = pred.job
    c = job.cluster
    return (f"{job.model.name} on {c.num_gpus:,} x {c.gpu.name} · plan {pred.graph.plan.short()} · "
            f"{est.tokens / 1e12:,.3g}T tokens in {est.steps:,} steps")


def goodput_tables(pred, est) -> list:
    """Rich tables: the summary, where the time beyond the ideal goes, and the Monte Carlo check."""
    from rich.table import Table

    from ..units import format_si
    ck, rs = est.checkpoint, est.restart
    t = Table(show_header=False, title="time to train", title_justify="left")
    t.add_column("field", style="bold")
    t.add_column("value")
    rows = [
        ("step time", f"{_dur(est.step_time_s)}" + (f" ({_dur(est.step_time_s * (1 + est.straggler_slowdown))} with "
                                                    f"stragglers, +{est.straggler_slowdown * 100:.1f}%)"
                                                    if est.straggler_slowdown > 0 else "")),
        ("ideal", f"{_dur(est.ideal_time_to_train_s)} (every step at the predicted speed, no failures)"),
        ("expected", _dur(est.expected_time_to_train_s)),
        ("goodput", f"{est.goodput * 100:.1f}% (effective training time {est.effective_training_time_ratio * 100:.1f}%)"),
        ("failures", f"MTBF {_dur(est.mtbf_s)} ({est.failure_model}); {est.expected_failures:,.0f} expected"
                     + (f" + {est.expected_planned_interruptions:,.0f} planned" if est.expected_planned_interruptions >= 0.5 else "")),
        ("checkpoint", f"{format_si(ck.bytes_total, 'B')} ({ck.mode}, writers {ck.writers}): save {_dur(ck.save_s)}, "
                       f"stall {_dur(ck.blocking_s)}, load {_dur(ck.load_s)}"),
        ("interval", f"every {est.checkpoint_interval_steps:,} steps = {_dur(est.checkpoint_interval_s)} ({est.interval_source}); "
                     f"Young {_dur(est.young_interval_s)}, Daly {_dur(est.daly_interval_s)} "
                     f"(goodput {est.goodput_at_young * 100:.1f}% at Young's)"),
        ("restart", f"{_dur(rs.mean_s)} mean"
                    + (f"; hot spares {est.hot_spares} (free {rs.spare_available * 100:.0f}% of the time)" if est.hot_spares else "")),
    ]
    for k, v in rows:
        t.add_row(k, v)
    lost = Table(title="where the time beyond the ideal goes", title_justify="left")
    for col, just in (("part", "left"), ("time", "right"), ("share of expected", "right")):
        lost.add_column(col, justify=just)  # type: ignore[arg-type]
    total = est.expected_time_to_train_s
    for k, v in est.lost_s.items():
        lost.add_row(k, _dur(v), f"{v / total * 100:.1f}%")
    lost.add_row("total", _dur(total - est.ideal_time_to_train_s),
                 f"{(total - est.ideal_time_to_train_s) / total * 100:.1f}%")
    out = [t, lost]
    mc = est.monte_carlo
    if mc is not None:
        m = Table(show_header=False, title=f"Monte Carlo ({mc.runs:,} runs, seed {mc.seed})", title_justify="left")
        m.add_column("field", style="bold")
        m.add_column("value")
        m.add_row("mean", f"{_dur(mc.mean_s)} ({(mc.mean_s / total - 1) * 100:+.2f}% vs analytic)")
        half = (mc.ci95_s[1] - mc.ci95_s[0]) / 2
        m.add_row("95% CI of the mean", f"{_dur(mc.mean_s)} ± {_dur(half)} (± {half / mc.mean_s * 100:.2g}%)")
        m.add_row("p5 - p95 of a run", f"{_dur(mc.p5_s)} - {_dur(mc.p95_s)}")
        m.add_row("failures per run", f"{mc.mean_failures:,.1f}")
        out.append(m)
    return out
