"""Every terminal table of the command line (rich): describe, list, predict, validate, search,
goodput and sim. Rendering only: every number comes from the Python API's results; each function
returns the renderables (tables and lines) a command prints in order, e.g. with ``print_all``.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..predict import Prediction
from ..specs import ClusterSpec, ModelSpec
from ..units import format_duration, format_si
from ..validate.compare import ValidationReport

if TYPE_CHECKING:
    from ..reliability.goodput import GoodputEstimate
    from ..search.tuner import SearchResult
    from ..sim.replay import SimResult


def _gb(x: float) -> str:
    return f"{x / 2**30:,.1f} GiB"


def _dur(seconds: float) -> str:
    return format_duration(seconds) if math.isfinite(seconds) else "never"


def _count(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:,.0f}"


# ---- list -----------------------------------------------------------------------------------------
_CATALOG_COLUMNS: dict[str, list[tuple[str, Callable[[dict], str]]]] = {
    "models": [("name", lambda r: r["name"]), ("params", lambda r: f"{r['params'] / 1e9:,.2f} B"),
               ("active", lambda r: f"{r['active_params'] / 1e9:,.2f} B" if r["moe_experts"] else ""),
               ("layers", lambda r: str(r["layers"])), ("hidden", lambda r: str(r["hidden"])),
               ("heads/kv", lambda r: f"{r['heads']}/{r['kv_heads']}"), ("seq", lambda r: str(r["seq_len"]))],
    "gpus": [("name", lambda r: r["name"]), ("bf16 TFLOP/s", lambda r: f"{r['bf16_flops'] / 1e12:,.0f}"),
             ("fp8 TFLOP/s", lambda r: f"{r['fp8_flops'] / 1e12:,.0f}" if r["fp8_flops"] else "-"),
             ("HBM", lambda r: f"{r['hbm_bytes'] / 2**30:,.0f} GiB"),
             ("HBM TB/s", lambda r: f"{r['hbm_bandwidth_bytes_per_s'] / 1e12:.2f}"),
             ("link GB/s", lambda r: f"{r['scaleup_bandwidth_bytes_per_s'] / 1e9:,.0f}"),
             ("TDP", lambda r: f"{r['tdp_w']:,.0f} W"), ("node", lambda r: r["default_node"])],
    "nodes": [("name", lambda r: r["name"]), ("gpu", lambda r: r["gpu"]), ("GPUs", lambda r: str(r["gpus_per_node"])),
              ("fabric", lambda r: r["scaleup_fabric"]),
              ("NICs", lambda r: f"{r['nics_per_node']} x {r['nic_bandwidth_bytes_per_s'] * 8 / 1e9:,.0f} Gb/s")],
    "clusters": [("name", lambda r: r["name"]), ("gpu", lambda r: r["gpu"]), ("GPUs", lambda r: f"{r['num_gpus']:,}"),
                 ("nodes", lambda r: f"{r['num_nodes']:,}"), ("topology", lambda r: r["topology"]),
                 ("taper", lambda r: f"{r['oversubscription']:g}")],
}


def catalog_table(kind: str, rows: list[dict]) -> Table:
    """`clustertwin list KIND`: the presets' rows (catalog.list_presets) with their sources."""
    t = Table(title=f"{kind} ({len(rows)})", title_justify="left")
    cols = _CATALOG_COLUMNS[kind]
    for name, _ in cols:
        t.add_column(name)
    t.add_column("source", overflow="fold", max_width=50)
    for r in rows:
        t.add_row(*[f(r) for _, f in cols], r.get("source", ""))
    return t


def model_table(m: ModelSpec) -> Table:
    t = Table(title=f"model {m.name}", show_header=False, title_justify="left")
    t.add_column("field", style="bold")
    t.add_column("value")
    rows = [
        ("parameters", f"{m.params_total / 1e9:,.2f} B" + (f" ({m.params_active / 1e9:,.2f} B active)" if m.is_moe else "")),
        ("non-embedding", f"{m.params_non_embedding / 1e9:,.2f} B"),
        ("layers x hidden", f"{m.num_layers} x {m.hidden_size}"),
        ("heads (kv)", f"{m.num_heads} ({m.kv_heads})" + (" MLA" if m.mla else "")),
        ("MLP", f"{m.activation} {m.ffn_hidden_size}"),
        ("vocab, max seq", f"{m.vocab_size:,}, {m.max_seq_len:,}"),
        ("norm, positions", f"{m.norm}, {m.positions}"),
        ("FLOPs per token", f"{m.flops_per_token() / 1e9:,.1f} GFLOP (train, seq {m.max_seq_len})"),
    ]
    if m.is_moe:
        rows.append(("experts", f"{m.moe_num_experts} routed (top {m.moe_top_k}), {m.moe_num_shared_experts} shared, "
                                f"width {m.expert_ffn}, {m.num_moe_layers} MoE layers"))
    if m.source:
        rows.append(("source", m.source))
    for k, v in rows:
        t.add_row(k, v)
    return t


def cluster_table(c: ClusterSpec) -> Table:
    g, n = c.gpu, c.node
    t = Table(title=f"cluster {c.name}", show_header=False, title_justify="left")
    t.add_column("field", style="bold")
    t.add_column("value")
    rows = [
        ("GPUs", f"{c.num_gpus:,} x {g.name} ({c.num_nodes:,} nodes of {n.gpus_per_node}, {n.name})"),
        ("peak per GPU", f"bf16 {format_si(g.peak('bf16'), 'FLOP/s')}"
                         + (f", fp8 {format_si(g.peak_flops['fp8'], 'FLOP/s')}" if "fp8" in g.peak_flops else "")),
        ("HBM", f"{_gb(g.hbm_bytes)} at {format_si(g.hbm_bandwidth_bytes_per_s, 'B/s')}"),
        ("scale-up", f"{n.scaleup_fabric}, {format_si(n.gpu_scaleup_bandwidth, 'B/s')} per GPU each way"),
        ("scale-out", f"{n.nics_per_node} x {format_si(n.nic_bandwidth_bytes_per_s * 8, 'b/s')} per node, {c.topology}"
                      + (f", {c.oversubscription:g}:1 taper" if c.oversubscription > 1 else "")),
    ]
    for k, v in rows:
        t.add_row(k, v)
    return t


def prediction_tables(p: Prediction) -> list:
    job, plan = p.job, p.graph.plan
    title = Text.assemble((f"{job.model.name}", "bold"), f" on {job.cluster.num_gpus:,} x {job.cluster.gpu.name}\n",
                          f"plan {plan.short()} · seq {job.seq_len} · global batch {plan.global_batch} · "
                          f"{plan.precision} · {job.framework}")
    head = Table(show_header=False)
    head.add_column("metric", style="bold")
    head.add_column("value")
    head.add_row("step time", format_duration(p.step_time_s))
    from ..calibrate.bands import describe
    head.add_row("expected error", describe(p.expected_error))
    head.add_row("tokens/s", f"{p.tokens_per_s:,.0f} ({p.tokens_per_s / job.cluster.num_gpus:,.0f} per GPU)")
    head.add_row("model TFLOP/s per GPU", f"{p.tflops_per_gpu:,.1f}")
    head.add_row("MFU / HFU", f"{p.mfu * 100:.1f}% / {p.hfu * 100:.1f}% of {format_si(p.peak_flops, 'FLOP/s')}")
    head.add_row("micro-batches", f"{p.graph.num_microbatches} per step")
    fits = "[green]fits[/green]" if p.fits else "[red]does NOT fit[/red]"
    head.add_row("memory per GPU", f"{_gb(p.memory.total_bytes)} of {_gb(p.memory.capacity_bytes)}: {fits}")

    bd = Table(title="where the step time goes", title_justify="left")
    bd.add_column("part")
    bd.add_column("time", justify="right")
    bd.add_column("share", justify="right")
    bd.add_column("")
    for k, v in p.breakdown_s.items():
        if v <= 0:
            continue
        share = v / p.step_time_s
        bd.add_row(k, format_duration(v), f"{share * 100:.1f}%", "█" * max(1, round(share * 30)))
    bd.add_row("[bold]total[/bold]", f"[bold]{format_duration(p.step_time_s)}[/bold]", "100%", "")

    mem = Table(title=f"memory per GPU (stage {p.memory.critical_stage}, the most loaded)", title_justify="left")
    mem.add_column("part")
    mem.add_column("bytes", justify="right")
    mem.add_column("share of HBM", justify="right")
    for k, v in p.memory.breakdown_bytes.items():
        mem.add_row(k, _gb(v), f"{v / p.memory.capacity_bytes * 100:.1f}%")
    mem.add_row("[bold]total[/bold]", f"[bold]{_gb(p.memory.total_bytes)}[/bold]",
                f"{p.memory.total_bytes / p.memory.capacity_bytes * 100:.1f}%")
    return [title, head, bd, mem]


def validation_tables(rep: ValidationReport, cv: "CrossValidation | None" = None) -> list:
    """`clustertwin validate`: the rows, then the counts and the errors; with ``cv`` (--cv source) the rows
    are out of sample, and a table per held-out source and per file follows."""
    by = ", ".join(f"{k} {v * 100:.1f}%" for k, v in rep.mape_by_metric.items())
    out: list[Any] = [validation_table(rep),
                      f"rows: {len(rep.rows)}, predicted: {len(rep.ok_rows)}, failed: {len(rep.failed_rows)}",
                      f"MAPE{' (out of sample)' if cv else ''}: {rep.mape * 100:.1f}% ({by}); "
                      f"max |error|: {rep.max_abs_error * 100:.1f}%"]
    if cv is None:
        return out
    t = Table(title="leave-one-source-out: each source judged by a profile calibrated on the others",
              title_justify="left")
    t.add_column("held-out source", no_wrap=True, overflow="ellipsis", max_width=36)
    for col in ("rows", "fitted on", "MAPE uncalibrated", "MAPE out of sample", "max |error|"):
        t.add_column(col, justify="right")
    for f in cv.folds:
        t.add_row(f.group, str(len(f.report.rows)), str(f.n_train) if f.n_train else f.note,
                  f"{f.default.mape * 100:.1f}%", f"{f.report.mape * 100:.1f}%", f"{f.report.max_abs_error * 100:.1f}%")
    out.append(t)
    files = cv.by_file()
    if len(files) > 1:
        ft = Table(title="per file", title_justify="left")
        ft.add_column("file", no_wrap=True)
        for col in ("rows", "MAPE uncalibrated", "MAPE out of sample", "max |error|"):
            ft.add_column(col, justify="right")
        for name, d in files.items():
            ft.add_row(name, str(d["n"]), f"{d['mape_uncalibrated'] * 100:.1f}%", f"{d['mape'] * 100:.1f}%",
                       f"{d['max_abs_error'] * 100:.1f}%")
        out.append(ft)
    out.append(f"MAPE uncalibrated: {cv.default.mape * 100:.1f}%; out of sample: {rep.mape * 100:.1f}%")
    return out


def validation_table(rep: ValidationReport) -> Table:
    t = Table(title="predicted against measured", title_justify="left")
    for col, just in (("run", "left"), ("metric", "left"), ("measured", "right"), ("predicted", "right"),
                      ("error", "right")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in rep.rows:
        if r.error is None:
            t.add_row(r.run_id, r.metric, f"{r.measured:.4g}", "[red]failed[/red]", r.reason[:60])
            continue
        style = "green" if abs(r.error) <= 0.08 else ("yellow" if abs(r.error) <= 0.2 else "red")
        t.add_row(r.run_id, r.metric, f"{r.measured:.4g}", f"{r.predicted:.4g}", f"[{style}]{r.error * 100:+.1f}%[/{style}]")
    return t


# ---- search -------------------------------------------------------------------------------------
def search_tables(r: "SearchResult") -> list:
    """`clustertwin search`: what was searched, how many plans, what was pruned, the best plans and
    the Pareto view of step time against GPUs."""
    from ..search.space import PRUNE_REASONS
    from ..search.tuner import plan_text
    s = r.space
    out: list[Any] = [
        f"[bold]{s.model.name}[/bold] on {s.num_gpus:,} x {s.cluster.gpu.name} · seq {s.seq_len} · "
        f"global batch {s.global_batch} · {s.precision} · {s.framework} · objective {r.objective}"
        + (f" · fixed {', '.join(f'{k}={v}' for k, v in s.fixed.items())}" if s.fixed else ""),
        f"evaluated {r.evaluated:,} plans in {r.elapsed_s:.2f} s ({_count(r.plans_per_s)} plans/s); "
        f"{r.feasible:,} fit in {s.max_memory_fraction * 100:.0f}% of {_gb(s.cluster.gpu.hbm_bytes)}; "
        f"{r.shape_classes:,} shape classes priced"]
    if r.pruned:
        out.append("pruned: " + " · ".join(f"{PRUNE_REASONS.get(k, k)} {_count(v)}"
                                           for k, v in sorted(r.pruned.items(), key=lambda kv: -kv[1])))
    t = Table(title=f"best {len(r.plans)} by {r.objective}", title_justify="left")
    for col, just in (("#", "right"), ("plan", "left"), ("GPUs", "right"), ("step", "right"), ("MFU", "right"),
                      ("memory/GPU", "right")):
        t.add_column(col, justify=just, overflow="fold")  # type: ignore[arg-type]
    extra: list[tuple[str, Callable[[Any], str]]] = []
    if any(p.time_to_train_s is not None for p in r.plans):
        extra.append(("time to train", lambda p: format_duration(p.time_to_train_s)))
    if any(p.goodput is not None for p in r.plans):
        extra.append(("goodput", lambda p: f"{p.goodput * 100:.1f}%"))
    if any(p.cost_usd is not None for p in r.plans):
        extra.append(("cost", lambda p: f"${p.cost_usd:,.0f}" if p.cost_usd >= 100 else f"${p.cost_usd:,.2f}"))
    for name, _ in extra:
        t.add_column(name, justify="right")
    t.add_column("bottleneck", overflow="fold")
    for p in r.plans:
        pred = p.prediction
        t.add_row(str(p.rank), plan_text(pred), f"{p.num_gpus:,}", format_duration(pred.step_time_s),
                  f"{pred.mfu * 100:.1f}%",
                  f"{_gb(pred.memory.total_bytes)} ({pred.memory.total_bytes / pred.memory.capacity_bytes * 100:.0f}%)",
                  *[f(p) for _, f in extra], p.bottleneck)
    out.append(t)
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
                cells.append(f"${q.cost_per_step_usd(price):,.2f}")
            cells += [f"{pred.mfu * 100:.1f}%", "yes" if q.on_front else "no"]
            pt.add_row(*cells)
        out.append(pt)
    return out


# ---- goodput ------------------------------------------------------------------------------------
def goodput_tables(pred: Prediction, est: "GoodputEstimate") -> list:
    """`clustertwin goodput`: the job line, the summary, where the time beyond the ideal goes, and
    the Monte Carlo check."""
    job = pred.job
    c = job.cluster
    head = (f"{job.model.name} on {c.num_gpus:,} x {c.gpu.name} · plan {pred.graph.plan.short()} · "
            f"{est.tokens / 1e12:,.3g}T tokens in {est.steps:,} steps")
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
    out: list[Any] = [head, t, lost]
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


# ---- sim ----------------------------------------------------------------------------------------
def sim_tables(result: "SimResult", predicted_step_time_s: float) -> list:
    """`clustertwin sim`: the job line, the replay against predict, and one row per simulated rank."""
    job, g = result.job, result.graph
    out: list[Any] = [f"{job.model.name} on {job.cluster.num_gpus:,} x {job.cluster.gpu.name} · {g.plan.short()} · "
                      f"{g.num_microbatches} micro-batches · {job.framework}"]
    predicted = predicted_step_time_s
    t = Table(show_header=False, title="replay of one iteration", title_justify="left")
    t.add_column("field", style="bold")
    t.add_column("value")
    base = result.baseline_step_time_s if result.baseline_step_time_s is not None else result.step_time_s
    t.add_row("step time (sim)", format_duration(base) + (" without the slow GPU" if result.slow_rank is not None else ""))
    t.add_row("step time (predict)", f"{format_duration(predicted)} (sim {100 * (base / predicted - 1):+.1f}%)")
    if result.slow_rank is not None:
        t.add_row("with the slow GPU", f"{format_duration(result.step_time_s)} "
                                       f"({100 * (result.step_time_s / base - 1):+.1f}%): "
                                       f"rank {result.slow_rank} computes {result.slowdown:g}x slower")
    t.add_row("simulated", f"{len(result.ranks)} ranks standing for {job.cluster.num_gpus:,} GPUs "
                           f"({result.tasks_simulated:,} tasks); TP/CP peers and DP replicas are symmetric")
    out.append(t)
    r = Table(title="per simulated rank", title_justify="left")
    for col in ("rank", "stage", "replica", "stands for", "busy", "idle", "after last bwd", "ends"):
        r.add_column(col, justify="right" if col not in ("replica",) else "left")
    for x in result.ranks:
        s = x.summary()
        r.add_row(str(x.rank), str(x.stage), x.replica + (" (slow GPU)" if x.rank == result.slow_rank else ""),
                  f"{x.represents:,}", format_duration(s["compute_busy_s"] + s["optimizer_s"]),
                  format_duration(s["idle_s"]), format_duration(s["end_s"] - s["last_backward_end_s"]),
                  format_duration(s["end_s"]))
    out.append(r)
    return out


def print_all(console: Console, items: list) -> None:
    """Print a command's renderables (tables, lines) in order."""
    for t in items:
        console.print(t)
