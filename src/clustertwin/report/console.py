"""Every terminal table of the command line (rich): describe, list, predict, compare, validate,
search, goodput and sim. Rendering only: every number comes from the Python API's results; each function
returns the renderables (tables and lines) a command prints in order, e.g. with ``print_all``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

from ..units import format_duration, format_si

if TYPE_CHECKING:   # annotations only: a command imports what it renders, nothing more
    from ..predict import Prediction
    from ..specs import ClusterSpec, ModelSpec
    from ..validate.compare import CrossValidation, ValidationReport
    from ..reliability.goodput import GoodputEstimate
    from ..compare import Comparison
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


# ---- tables that read at any width --------------------------------------------------------------
GAP = 2            # blank columns between two cells
WRAP_LINES = 2     # a wrapping column gets the width to hold its longest cell in this many lines


@dataclass
class Col:
    """One column of a ``Fit`` table. ``flex``: "wrap" (wraps at spaces, given room for WRAP_LINES
    lines), "cut" (one line, cut with an ellipsis where the room runs out) or None (never wraps nor
    cut). ``drop``: 0 is always shown; columns with a higher number are left out first, one at a time,
    when the table would not fit the width it is printed at."""

    header: str
    justify: str = "left"
    flex: str | None = None
    drop: int = 0
    style: str | None = None


def _text(cell: Any) -> Text:
    return cell if isinstance(cell, Text) else Text(str(cell))


def _width(t: Text) -> int:
    return max((len(line) for line in t.plain.split("\n")), default=0)


def _min_width(col: Col, cells: list[Text]) -> int:
    """The least width a column needs: its header, and its cells' widths (fixed columns), their
    longest word and a WRAP_LINES-th of the longest cell (wrap), or a short prefix (cut)."""
    head = max((len(w) for w in col.header.split("\n")), default=0)
    widest = max((_width(c) for c in cells), default=0)
    if col.flex == "wrap":
        word = max((len(w) for c in cells for w in c.plain.split()), default=0)
        need = max(word, -(-widest // WRAP_LINES) + 4)  # + slack: lines break at spaces
        return max(head, min(widest, need))
    if col.flex == "cut":
        return max(head, min(widest, 16))
    return max(head, widest)


class Fit:
    """A table laid out for the width it is printed at (a rich renderable): columns that do not fit
    are left out, least needed first; the flexible ones get the room left (wrapping, or cut). Plain
    box: no vertical rules, a rule under the header, so that 80 columns hold the numbers."""

    def __init__(self, columns: Sequence[Col], rows: Iterable[Sequence[Any]], title: str | None = None, *,
                 show_header: bool = True, caption: str | None = None):
        self.columns = list(columns)
        self.rows = [[_text(c) for c in r] for r in rows]
        for r in self.rows:
            assert len(r) == len(self.columns), (len(r), [c.header for c in self.columns])
        self.title, self.show_header, self.caption = title, show_header, caption

    @property
    def row_count(self) -> int:
        return len(self.rows)

    def shown(self, width: int) -> list[int]:
        """The indices of the columns shown at ``width``."""
        keep = list(range(len(self.columns)))
        mins = [_min_width(c, [r[i] for r in self.rows]) for i, c in enumerate(self.columns)]

        def need() -> int:
            return sum(mins[i] for i in keep) + GAP * (len(keep) - 1)
        while need() > width:
            droppable = [i for i in keep if self.columns[i].drop > 0]
            if not droppable:
                break
            keep.remove(max(droppable, key=lambda i: (self.columns[i].drop, i)))
        return keep

    def table(self, width: int) -> Table:
        """The rich Table at ``width`` columns."""
        keep = self.shown(width)
        t = Table(title=self.title, title_justify="left", caption=self.caption, caption_justify="left",
                  show_header=self.show_header, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  padding=(0, GAP - 1, 0, 0), title_style="bold", caption_style="dim",
                  min_width=min(width, max((len(x) for x in (self.title or "").split("\n")), default=0)))
        for i in keep:
            c = self.columns[i]
            t.add_column(c.header, justify=c.justify, no_wrap=c.flex is None,  # type: ignore[arg-type]
                         overflow="ellipsis" if c.flex == "cut" else "fold", style=c.style)
        for r in self.rows:
            cells = []
            for i in keep:
                cell = r[i]
                if self.columns[i].flex == "cut":
                    cell = cell.copy()
                    cell.no_wrap, cell.overflow = True, "ellipsis"
                cells.append(cell)
            t.add_row(*cells)
        return t

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.table(options.max_width)


def _fields(title: str | None, rows: Iterable[tuple[str, Any]]) -> Fit:
    """A two-column table of named values (no header); the values wrap."""
    return Fit([Col("field", style="bold"), Col("value", flex="wrap")], rows, title, show_header=False)


def short_source(text: str) -> str:
    """The first clause of a source (up to the first ',', ';' or ':' outside brackets): who and when,
    e.g. "DeepSeek-AI 2024" or "NVIDIA A100 Tensor Core GPU datasheet (nvidia.com, 2021)"."""
    depth = 0
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(0, depth - 1)
        elif ch in ",;:" and depth == 0 and (i + 1 == len(text) or text[i + 1] == " "):
            return text[:i]
    return text


# ---- list -----------------------------------------------------------------------------------------
# header, justify, drop (0: always shown), cell
_CATALOG_COLUMNS: dict[str, list[tuple[str, str, int, Callable[[dict], str]]]] = {
    "models": [("name", "left", 0, lambda r: r["name"]),
               ("params", "right", 0, lambda r: f"{r['params'] / 1e9:,.2f} B"),
               ("active", "right", 0, lambda r: f"{r['active_params'] / 1e9:,.2f} B" if r["moe_experts"] else ""),
               ("layers", "right", 3, lambda r: str(r["layers"])), ("hidden", "right", 3, lambda r: str(r["hidden"])),
               ("heads/kv", "right", 3, lambda r: f"{r['heads']}/{r['kv_heads']}"),
               ("seq", "right", 2, lambda r: str(r["seq_len"]))],
    "gpus": [("name", "left", 0, lambda r: r["name"]),
             ("bf16\nTFLOP/s", "right", 0, lambda r: f"{r['bf16_flops'] / 1e12:,.0f}"),
             ("fp8\nTFLOP/s", "right", 0, lambda r: f"{r['fp8_flops'] / 1e12:,.0f}" if r["fp8_flops"] else "-"),
             ("HBM", "right", 0, lambda r: f"{r['hbm_bytes'] / 2**30:,.0f} GiB"),
             ("HBM\nTB/s", "right", 2, lambda r: f"{r['hbm_bandwidth_bytes_per_s'] / 1e12:.2f}"),
             ("link\nGB/s", "right", 2, lambda r: f"{r['scaleup_bandwidth_bytes_per_s'] / 1e9:,.0f}"),
             ("TDP", "right", 3, lambda r: f"{r['tdp_w']:,.0f} W"), ("node", "left", 3, lambda r: r["default_node"])],
    "nodes": [("name", "left", 0, lambda r: r["name"]), ("gpu", "left", 0, lambda r: r["gpu"]),
              ("GPUs", "right", 0, lambda r: str(r["gpus_per_node"])),
              ("fabric", "left", 2, lambda r: r["scaleup_fabric"]),
              ("NICs", "left", 0, lambda r: f"{r['nics_per_node']} x {r['nic_bandwidth_bytes_per_s'] * 8 / 1e9:,.0f} Gb/s")],
    "clusters": [("name", "left", 0, lambda r: r["name"]), ("gpu", "left", 0, lambda r: r["gpu"]),
                 ("GPUs", "right", 0, lambda r: f"{r['num_gpus']:,}"), ("nodes", "right", 2, lambda r: f"{r['num_nodes']:,}"),
                 ("topology", "left", 0, lambda r: r["topology"]), ("taper", "right", 3, lambda r: f"{r['oversubscription']:g}")],
}


def catalog_table(kind: str, rows: list[dict], wide: bool = False) -> Fit:
    """`clustertwin list KIND`: the presets' rows (catalog.list_presets) with their sources: the
    first clause of each, cut to the width (``wide``: the full text, wrapped)."""
    cols = [Col(h, j, drop=d) for h, j, d, _ in _CATALOG_COLUMNS[kind]]
    cols.append(Col("source", flex="wrap" if wide else "cut", drop=0 if wide else 1))
    cells = [[f(r) for _, _, _, f in _CATALOG_COLUMNS[kind]] + [r.get("source", "") if wide else
                                                                 short_source(r.get("source", ""))] for r in rows]
    return Fit(cols, cells, f"{kind} ({len(rows)})",
               caption=None if wide else "sources: first clause; --wide or --json for the full text")


def model_table(m: ModelSpec) -> Fit:
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
        rows += _source_rows(m.source)
    return _fields(f"model {m.name}", rows)


def _source_rows(source: str) -> list[tuple[str, str]]:
    """A source in rows of one clause each (split at '; '), so that none wraps far."""
    parts = [p.strip() for p in source.split("; ") if p.strip()]
    return [("source" if i == 0 else "", p) for i, p in enumerate(parts)]


def cluster_table(c: ClusterSpec) -> Fit:
    g, n = c.gpu, c.node
    rows = [
        ("GPUs", f"{c.num_gpus:,} x {g.name} ({c.num_nodes:,} nodes of {n.gpus_per_node}, {n.name})"),
        ("peak per GPU", f"bf16 {format_si(g.peak('bf16'), 'FLOP/s')}"
                         + (f", fp8 {format_si(g.peak_flops['fp8'], 'FLOP/s')}" if "fp8" in g.peak_flops else "")),
        ("HBM", f"{_gb(g.hbm_bytes)} at {format_si(g.hbm_bandwidth_bytes_per_s, 'B/s')}"),
        ("scale-up", f"{n.scaleup_fabric}, {format_si(n.gpu_scaleup_bandwidth, 'B/s')} per GPU each way"),
        ("scale-out", f"{n.nics_per_node} x {format_si(n.nic_bandwidth_bytes_per_s * 8, 'b/s')} per node, {c.topology}"
                      + (f", {c.oversubscription:g}:1 taper" if c.oversubscription > 1 else "")),
    ]
    return _fields(f"cluster {c.name}", rows)


def _energy_line(p: Prediction) -> str:
    e = p.energy
    gpu = p.job.cluster.gpu
    capped = f" (cap {gpu.tdp_w:,.0f} W)" if gpu.rated_tdp_w and gpu.tdp_w < gpu.rated_tdp_w else ""
    return (f"{format_si(e.energy_per_step_j, 'J')}/step, {e.energy_per_token_j:.3g} J/token; "
            f"{e.average_power_per_gpu_w:,.0f} W/GPU{capped}")


def prediction_tables(p: Prediction) -> list:
    from ..calibrate.bands import describe
    job, plan = p.job, p.graph.plan
    title = Text.assemble((f"{job.model.name}", "bold"), f" on {job.cluster.num_gpus:,} x {job.cluster.gpu.name}\n",
                          f"plan {plan.short()} · seq {job.seq_len} · global batch {plan.global_batch}"
                          f"{' (default: 2M tokens)' if job.global_batch_source == 'default' else ''} · "
                          f"{plan.precision} · {job.framework}")
    fits = Text.from_markup("[green]fits[/green]" if p.fits else "[red]does NOT fit[/red]")
    head = _fields(None, [
        ("step time", format_duration(p.step_time_s)),
        ("expected error", describe(p.expected_error)),
        *([("assumed", "; ".join(p.assumptions))] if p.assumptions else []),
        ("tokens/s", f"{p.tokens_per_s:,.0f} ({p.tokens_per_s / job.cluster.num_gpus:,.0f} per GPU)"),
        ("model TFLOP/s per GPU", f"{p.tflops_per_gpu:,.1f}"),
        ("MFU / HFU", f"{p.mfu * 100:.1f}% / {p.hfu * 100:.1f}% of {format_si(p.peak_flops, 'FLOP/s')} (causal; "
                      f"{p.mfu_full_attention * 100:.1f}% as papers count attention)"),
        ("micro-batches", f"{p.graph.num_microbatches} per step"),
        ("energy", _energy_line(p)),
        ("memory per GPU", Text.assemble(f"{_gb(p.memory.total_bytes)} of {_gb(p.memory.capacity_bytes)}: ", fits)),
    ])

    rows: list[list[Any]] = []
    for k, v in p.breakdown_s.items():
        if v <= 0:
            continue
        share = v / p.step_time_s
        rows.append([k, format_duration(v), f"{share * 100:.1f}%", "█" * max(1, round(share * 30))])
    bold = "bold"
    rows.append([Text("total", bold), Text(format_duration(p.step_time_s), bold), "100%", ""])
    bd = Fit([Col("part"), Col("time", "right"), Col("share", "right"), Col("", flex="cut", drop=1)], rows,
             "where the step time goes")

    mrows: list[list[Any]] = [[k, _gb(v), f"{v / p.memory.capacity_bytes * 100:.1f}%"]
                              for k, v in p.memory.breakdown_bytes.items()]
    mrows.append([Text("total", bold), Text(_gb(p.memory.total_bytes), bold),
                  f"{p.memory.total_bytes / p.memory.capacity_bytes * 100:.1f}%"])
    mem = Fit([Col("part"), Col("bytes", "right"), Col("share of HBM", "right")], mrows,
              f"memory per GPU (stage {p.memory.critical_stage}, the most loaded)")
    return [title, head, bd, mem]


def validation_tables(rep: ValidationReport, cv: "CrossValidation | None" = None) -> list:
    """`clustertwin validate`: the rows, then the counts and the errors; with ``cv`` (--cv source) the rows
    are out of sample, and a table per held-out source and per file follows."""
    by = ", ".join(f"{k} {v * 100:.1f}%" for k, v in rep.mape_by_metric.items())
    out: list[Any] = [validation_table(rep),
                      f"rows: {len(rep.rows)}, predicted: {len(rep.ok_rows)}, failed: {len(rep.failed_rows)}"
                      + (f", predicted not to fit in GPU memory: {len(rep.not_fitting)}" if rep.not_fitting else ""),
                      f"MAPE{' (out of sample)' if cv else ''}: {rep.mape * 100:.1f}% ({by}); "
                      f"max |error|: {rep.max_abs_error * 100:.1f}%"]
    if cv is None:
        return out
    cols = [Col("held-out source", flex="cut"), Col("rows", "right"), Col("fitted on", "right", drop=1),
            Col("MAPE uncal.", "right", drop=2), Col("MAPE out of sample", "right"), Col("max |error|", "right", drop=1)]
    rows = [[f.group, str(len(f.report.rows)), str(f.n_train) if f.n_train else f.note,
             f"{f.default.mape * 100:.1f}%", f"{f.report.mape * 100:.1f}%", f"{f.report.max_abs_error * 100:.1f}%"]
            for f in cv.folds]
    out.append(Fit(cols, rows, "leave-one-source-out: each source judged by a profile calibrated on the others"))
    files = cv.by_file()
    if len(files) > 1:
        fcols = [Col("file", flex="cut"), Col("rows", "right"), Col("MAPE uncal.", "right", drop=1),
                 Col("MAPE out of sample", "right"), Col("max |error|", "right", drop=2)]
        frows = [[name, str(d["n"]), f"{d['mape_uncalibrated'] * 100:.1f}%", f"{d['mape'] * 100:.1f}%",
                  f"{d['max_abs_error'] * 100:.1f}%"] for name, d in files.items()]
        out.append(Fit(fcols, frows, "per file"))
    out.append(f"MAPE uncalibrated: {cv.default.mape * 100:.1f}%; out of sample: {rep.mape * 100:.1f}%")
    return out


def validation_table(rep: ValidationReport) -> Fit:
    """One row per measured metric (the metric named once in the title when all rows share it); a row
    that could not be predicted says why (cut to the width)."""
    metrics = {r.metric for r in rep.rows}
    one = len(metrics) == 1
    rows: list[list[Any]] = []
    for r in rep.rows:
        first = [r.run_id] + ([] if one else [r.metric]) + [f"{r.measured:.4g}"]
        if r.error is None:
            rows.append(first + [Text("failed", "red"), r.reason])
            continue
        style = "green" if abs(r.error) <= 0.08 else ("yellow" if abs(r.error) <= 0.2 else "red")
        predicted: Any = f"{r.predicted:.4g}"
        if r.fits is False:
            predicted = Text.assemble(predicted, ("*", "red"))
        rows.append(first + [predicted, Text(f"{r.error * 100:+.1f}%", style)])
    cols = [Col("run", flex="wrap")] + ([] if one else [Col("metric")]) + [
        Col("measured", "right"), Col("predicted", "right"),
        Col("error", "right", flex="cut" if rep.failed_rows else None)]
    return Fit(cols, rows, "predicted against measured" + (f": {next(iter(metrics))}" if one else ""),
               caption="*: predicted not to fit in GPU memory" if rep.not_fitting else None)


# ---- search -------------------------------------------------------------------------------------
def plan_cell(text: str) -> str:
    """A plan in --plan syntax with a space after each comma, so that it wraps between fields (the
    spaces are read as before)."""
    return text.replace(",", ", ")


_POLICY_SHORT = {"in-memory-checkpoint": "in-mem", "hot-spare": "spare", "elastic-dp": "elastic",
                 "live-migration": "migrate"}


def _policy_short(name: str | None) -> str:
    """A resilience policy in a search table: in-memory-checkpoint+hot-spare -> in-mem+spare (the names of
    `goodput --compare-policies`)."""
    return "+".join(_POLICY_SHORT.get(x, x) for x in name.split("+")) if name else ""


def search_tables(r: "SearchResult") -> list:
    """`clustertwin search`: what was searched, how many plans, what was pruned, the best plans (what
    limits each in a few words), what limits the best and how to relieve it, and the Pareto view of
    step time against GPUs."""
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
    cols = [Col("#", "right"), Col("plan", flex="wrap")]
    cells: list[Callable[[Any], Any]] = [lambda p: str(p.rank), lambda p: plan_cell(plan_text(p.prediction))]
    if {p.num_gpus for p in r.plans} != {s.num_gpus}:    # the cost objective looks at fewer GPUs too
        cols.append(Col("GPUs", "right"))
        cells.append(lambda p: f"{p.num_gpus:,}")
    cols += [Col("step", "right"), Col("MFU", "right", drop=2), Col("memory/GPU", "right", drop=1)]
    cells += [lambda p: format_duration(p.prediction.step_time_s), lambda p: f"{p.prediction.mfu * 100:.1f}%",
              lambda p: f"{_gb(p.prediction.memory.total_bytes)} "
                        f"{p.prediction.memory.total_bytes / p.prediction.memory.capacity_bytes * 100:.0f}%"]
    if any(p.time_to_train_s is not None for p in r.plans):
        cols.append(Col("time to\ntrain", "right"))
        cells.append(lambda p: format_duration(p.time_to_train_s))
    if any(p.goodput is not None for p in r.plans):
        cols.append(Col("goodput", "right"))
        cells.append(lambda p: f"{p.goodput * 100:.1f}%")
    if any(getattr(p, "policy", None) for p in r.plans):    # --objective goodput: the policy priced (or chosen)
        cols.append(Col("policy", flex="wrap"))
        cells.append(lambda p: _policy_short(p.policy))
    if any(p.cost_usd is not None for p in r.plans):
        cols.append(Col("cost", "right"))
        cells.append(lambda p: f"${p.cost_usd:,.0f}" if p.cost_usd >= 100 else f"${p.cost_usd:,.2f}")
    cols.append(Col("bottleneck", drop=3))
    cells.append(lambda p: p.bottleneck_tag)
    out.append(Fit(cols, [[f(p) for f in cells] for p in r.plans], f"best {len(r.plans)} by {r.ranked_by}"))
    out.append(f"[bold]bottleneck of #1:[/bold] {r.plans[0].bottleneck}")
    if len(r.pareto) > 1:
        price = r.gpu_hour_price
        # with tokens to train, each GPU count's whole run: the trade-off of time against money
        whole = any(q.plan is not None and q.plan.time_to_train_s is not None for q in r.pareto)
        pcols = [Col("GPUs", "right"), Col("best plan", flex="wrap"), Col("step", "right"),
                 Col("GPU-h\n/step", "right", drop=2 if whole else 0)] \
            + ([Col("cost\n/step", "right", drop=2 if whole else 0)] if price else []) \
            + ([Col("time to\ntrain", "right")] if whole else []) \
            + ([Col("run\ncost", "right")] if whole and price else []) \
            + [Col("MFU", "right", drop=1), Col("front", "right")]
        prows: list[list[Any]] = []
        for q in r.pareto:
            if q.plan is None:
                prows.append([f"{q.num_gpus:,}", "nothing fits", "", "", *([""] if price else []),
                              *([""] if whole else []), *([""] if whole and price else []), "", ""])
                continue
            pred = q.plan.prediction
            row = [f"{q.num_gpus:,}", plan_cell(plan_text(pred)), format_duration(pred.step_time_s),
                   f"{q.gpu_hours_per_step:,.3g}"]
            if price:
                row.append(f"${q.cost_per_step_usd(price):,.2f}")
            if whole:
                t = q.plan.time_to_train_s
                row.append(format_duration(t) if t is not None else "")
                if price:
                    c = q.plan.cost_usd
                    row.append(f"${c:,.0f}" if c is not None else "")
            row += [f"{pred.mfu * 100:.1f}%", "yes" if q.on_front else "no"]
            prows.append(row)
        out.append(Fit(pcols, prows, "Pareto: step time against GPUs" + (" (and the whole run: time against money)"
                                                                          if whole else ""),
                       caption="GPU-hours per step is the cost at any price"))
    return out


# ---- compare ------------------------------------------------------------------------------------
def _delta(x: float, better_low: bool) -> Text:
    """A relative difference, green where better, red where worse."""
    if abs(x) < 5e-4:
        return Text("=", "dim")
    good = (x < 0) == better_low
    return Text(f"{x * 100:+.1f}%", "green" if good else "red")


def compare_tables(c: "Comparison") -> list:
    """`clustertwin compare`: the job, then one row per plan or cluster with its difference from the
    first (green: better, red: worse), and what limits the baseline."""
    from ..search.tuner import bottleneck, bottleneck_tag, plan_text
    base = c.rows[0].prediction
    job = base.job
    same = f"{job.cluster.num_gpus:,} x {job.cluster.gpu.name}" if c.varies == "plan" else f"plan {plan_text(base)}"
    out: list[Any] = [f"[bold]{job.model.name}[/bold] · {same} · seq {job.seq_len} · global batch "
                      f"{job.plan.global_batch} · {job.plan.precision} · {job.framework}"]
    cols = [Col("#", "right"), Col(c.varies, flex="wrap")]
    if c.varies == "cluster":
        cols.append(Col("GPUs", "right"))
    cols += [Col("step", "right"), Col("Δ", "right"), Col("tokens/s\nper GPU", "right", drop=2),
             Col("Δ", "right", drop=2), Col("MFU", "right", drop=3), Col("memory/GPU", "right"),
             Col("bottleneck", drop=4)]
    rows = []
    for i, r in enumerate(c.rows):
        p = r.prediction
        mem = Text(f"{_gb(p.memory.total_bytes)} {p.memory.total_bytes / p.memory.capacity_bytes * 100:.0f}%"
                   + ("" if p.fits else " *"), "" if p.fits else "red")
        label = plan_cell(plan_text(p)) if c.varies == "plan" else r.label
        row: list[Any] = [str(i + 1), label]
        if c.varies == "cluster":
            row.append(f"{p.job.cluster.num_gpus:,}")
        base_row = i == c.baseline
        row += [format_duration(p.step_time_s), Text("base", "dim") if base_row else _delta(r.delta("step_time_s"), True),
                f"{p.tokens_per_s / p.job.cluster.num_gpus:,.0f}",
                Text("base", "dim") if base_row else _delta(r.delta("tokens_per_s_per_gpu"), False),
                f"{p.mfu * 100:.1f}%", mem, bottleneck_tag(p)]
        rows.append(row)
    out.append(Fit(cols, rows, f"{len(c.rows)} {c.varies}s against #1",
                   caption="Δ: difference from #1" + ("; memory *: does NOT fit, its time is not achievable"
                                                      if any(not r.prediction.fits for r in c.rows) else "")))
    out.append(f"[bold]bottleneck of #1:[/bold] {bottleneck(base)}")
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
    rows = [
        ("step time", f"{_dur(est.step_time_s)}" + (f" ({_dur(est.ideal_step_time_s)} at the mean GPU speed, "
                                                    f"+{est.straggler_slowdown * 100:.1f}% waiting for the slowest GPU)"
                                                    if est.straggler_slowdown > 0 else "")),
        ("ideal", f"{_dur(est.ideal_time_to_train_s)} (every step at the mean GPU speed, no failures)"),
        ("expected", _dur(est.expected_time_to_train_s)),
        ("goodput", f"{est.goodput * 100:.1f}% (effective training time {est.effective_training_time_ratio * 100:.1f}%)"),
        ("failures", f"MTBF {_dur(est.mtbf_s)} ({est.failure_model}); {est.expected_failures:,.0f} expected"
                     + (f" + {est.expected_planned_interruptions:,.0f} planned" if est.expected_planned_interruptions >= 0.5 else "")),
        ("checkpoint", f"{format_si(ck.bytes_total, 'B')} ({ck.mode}, writers {ck.writers}): save {_dur(ck.save_s)}, "
                       f"stall {_dur(ck.blocking_s)}, load {_dur(ck.load_s)}"),
        ("interval", f"every {est.checkpoint_interval_steps:,} steps = {_dur(est.checkpoint_interval_s)} "
                     f"({est.interval_source})"),
        ("", f"Young {_dur(est.young_interval_s)}, Daly {_dur(est.daly_interval_s)} "
             f"(goodput {est.goodput_at_young * 100:.1f}% at Young's)"),
        ("restart", f"{_dur(rs.mean_s)} mean"
                    + (f"; hot spares {est.hot_spares} (free {rs.spare_available * 100:.0f}% of the time)" if est.hot_spares else "")),
    ]
    t = _fields("time to train", rows)
    total = est.expected_time_to_train_s
    lrows = [[k, _dur(v), f"{v / total * 100:.1f}%"] for k, v in est.lost_s.items()]
    lrows.append(["total", _dur(total - est.ideal_time_to_train_s),
                  f"{(total - est.ideal_time_to_train_s) / total * 100:.1f}%"])
    lost = Fit([Col("part"), Col("time", "right"), Col("share of expected", "right")], lrows,
               "where the time beyond the ideal goes")
    out: list[Any] = [head, t, lost]
    mc = est.monte_carlo
    if mc is not None:
        half = (mc.ci95_s[1] - mc.ci95_s[0]) / 2
        out.append(_fields(f"Monte Carlo ({mc.runs:,} runs, seed {mc.seed})", [
            ("mean", f"{_dur(mc.mean_s)} ({(mc.mean_s / total - 1) * 100:+.2f}% vs analytic)"),
            ("95% CI of the mean", f"{_dur(mc.mean_s)} ± {_dur(half)} (± {half / mc.mean_s * 100:.2g}%)"),
            ("p5 - p95 of a run", f"{_dur(mc.p5_s)} - {_dur(mc.p95_s)}"),
            ("failures per run", f"{mc.mean_failures:,.1f}")]))
    return out


# ---- sim ----------------------------------------------------------------------------------------
def sim_tables(result: "SimResult", predicted_step_time_s: float, memory: Any = None,
               predicted_stragglers_s: float = 0.0) -> list:
    """`clustertwin sim`: the job line, the replay against predict (and, given the prediction's
    ``memory``, whether the plan fits: a time of a plan that does not fit is flagged), and one row per
    simulated rank. The replay runs every GPU at the mean speed, so it is compared with predict's step
    less ``predicted_stragglers_s``, its expected wait for the slowest GPU."""
    job, g = result.job, result.graph
    out: list[Any] = [f"{job.model.name} on {job.cluster.num_gpus:,} x {job.cluster.gpu.name} · {g.plan.short()} · "
                      f"{g.num_microbatches} micro-batches · {job.framework}"]
    predicted = predicted_step_time_s
    base = result.baseline_step_time_s if result.baseline_step_time_s is not None else result.step_time_s
    rows = [("step time (sim)", format_duration(base) + (" without the slow GPU" if result.slow_rank is not None else "")),
            ("step time (predict)", f"{format_duration(predicted)} (sim {100 * (base / predicted - 1):+.1f}%)"
             if predicted_stragglers_s <= 0 else
             f"{format_duration(predicted)}, of which {format_duration(predicted_stragglers_s)} waiting for the "
             f"slowest GPU, which the replay leaves out (sim "
             f"{100 * (base / (predicted - predicted_stragglers_s) - 1):+.1f}% against the rest)")]
    if result.slow_rank is not None:
        rows.append(("with the slow GPU", f"{format_duration(result.step_time_s)} "
                                          f"({100 * (result.step_time_s / base - 1):+.1f}%): "
                                          f"rank {result.slow_rank} computes {result.slowdown:g}x slower"))
    if memory is not None:
        fits = Text.from_markup("[green]fits[/green]" if memory.fits else "[red]does NOT fit[/red]")
        rows.append(("memory per GPU", Text.assemble(f"{_gb(memory.total_bytes)} of {_gb(memory.capacity_bytes)}: ",
                                                     fits)))
    rows.append(("simulated", f"{len(result.ranks)} ranks standing for {job.cluster.num_gpus:,} GPUs "
                              f"({result.tasks_simulated:,} tasks); TP/CP peers and DP replicas are symmetric"))
    out.append(_fields("replay of one iteration", rows))
    rrows = []
    for x in result.ranks:
        s = x.summary()
        rrows.append([str(x.rank), x.stage_label, x.replica + (" (slow GPU)" if x.rank == result.slow_rank else ""),
                      f"{x.represents:,}", format_duration(s["compute_busy_s"] + s["optimizer_s"]),
                      format_duration(s["idle_s"]), format_duration(s["end_s"] - s["last_backward_end_s"]),
                      format_duration(s["end_s"])])
    cols = [Col("rank", "right"), Col("stage", "right"), Col("replica", flex="wrap"), Col("stands\nfor", "right"),
            Col("busy", "right"), Col("idle", "right"), Col("after\nlast bwd", "right"), Col("ends", "right")]
    out.append(Fit(cols, rrows, "per simulated rank"))
    return out


def energy_tables(p: Prediction, plan: Any) -> list:
    """`clustertwin energy`: the chosen per-stage clocks and the time-energy frontier."""
    job = p.job
    title = Text.assemble((f"{job.model.name}", "bold"), f" on {job.cluster.num_gpus:,} x {job.cluster.gpu.name}, "
                          f"plan {p.graph.plan.short()}\n", f"energy plan within {plan.max_slowdown * 100:g}% "
                          f"slowdown: saves {plan.energy_saving * 100:.1f}% at {plan.slowdown * 100:+.2f}% step time")
    clocks = plan.clocks()
    unit = "MHz" if plan.reference_mhz else "x ref"
    crows = [[s, f"{next(iter(c.values())):g}", f"{list(c.values())[1]:g}"] for s, c in clocks.items()]
    ct = Fit([Col("stage"), Col(f"forward {unit}", "right"), Col(f"backward {unit}", "right")], crows,
             "clocks (the first forward and last backward of each stage keep the full clock)")
    b = plan.baseline_step_time_s, plan.baseline_energy_j
    frows = [[format_duration(pt["step_time_s"]), f"{(pt['step_time_s'] / b[0] - 1) * 100:+.2f}%",
              format_si(pt["energy_per_step_j"], "J"), f"{(1 - pt['energy_per_step_j'] / b[1]) * 100:.1f}%"]
             for pt in plan.frontier]
    ft = Fit([Col("step time", "right"), Col("slowdown", "right"), Col("energy/step", "right"),
              Col("saving", "right")], frows, "time-energy frontier")
    return [title, ct, ft, *plan.notes]


def heat_tables(node: Any, step_lost: float, step_gain: float) -> list:
    """`clustertwin heat`: each GPU's temperature, cap and clock, and what rebalancing the caps gains."""
    rows = [[str(i), f"{t:g} C", f"{c:,.0f} W", f"{f * 100:.1f}%", f"{nc:,.0f} W"]
            for i, (t, c, f, nc) in enumerate(zip(node.temps_c, node.caps_w, node.clocks, node.rebalanced_caps_w))]
    t = Fit([Col("GPU"), Col("temp", "right"), Col("cap", "right"), Col("clock", "right"),
             Col("rebalanced cap", "right")], rows, f"{node.gpu} node: clocks under the cap (of the reference)")
    head = _fields(None, [
        ("straggler", f"GPU {node.straggler}, {node.thermal_slowdown * 100:.1f}% slower than the others"),
        ("step time lost", f"{step_lost * 100:.2f}% (imbalance {node.imbalance_slowdown * 100:.1f}% on compute)"),
        ("rebalanced caps", f"{node.rebalance_gain * 100:.1f}% faster compute, step {step_gain * 100:.2f}% "
                            f"faster; {node.power_saving * 100:.1f}% of node power unused"),
        ("sim", f"clustertwin sim {node.sim_flags}"),
    ])
    return [t, head]


def print_all(console: Console, items: list) -> None:
    """Print a command's renderables (tables, lines) in order."""
    for t in items:
        console.print(t)
