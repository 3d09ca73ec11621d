"""Rich tables for the terminal. Pure formatting: every number comes from the core model."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..predict import Prediction
from ..specs import ClusterSpec, ModelSpec
from ..units import format_duration, format_si
from ..validate.compare import ValidationReport


def _gb(x: float) -> str:
    return f"{x / 2**30:,.1f} GiB"


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


def print_all(console: Console, tables: list) -> None:
    for t in tables:
        console.print(t)
