"""The views of ``clustertwin report``: report.data's dict, and nothing else, drawn as one
self-contained HTML page with plotly's JavaScript embedded (it opens offline) and the dict itself
embedded as ``<script type="application/json" id="clustertwin-data">``. Five views:

1. the step-time breakdown (the parts sum to the step time);
2. memory per GPU of every pipeline stage against the GPU's HBM;
3. the search landscape: step time against memory per GPU for the sampled feasible plans, the exact
   front of step time against memory, the best plans, and step time against GPUs (the search's
   Pareto view);
4. goodput against the checkpoint interval (the chosen checkpoint mode, the others dashed);
5. the pipeline timeline of one iteration from ``clustertwin.sim`` (the graph the trace exports):
   one row per stage, a bar per micro-batch forward and backward, DP communication and optimizer.

Plotly is imported only to render (the ``[report]`` extra); without it, ``render_html`` raises a
ClusterTwinError naming the fix.
"""
from __future__ import annotations

import html
import json
import math
from typing import Any

import numpy as np

from ..errors import ClusterTwinError, DataError
from ..units import format_duration
from .data import VIEWS

_GIB = 2.0 ** 30

# colours (colour-blind safe, Okabe-Ito / Tableau)
_PART_COLORS = {"compute": "#4C78A8", "recompute": "#9ECAE9", "tp_comm": "#F58518", "cp_comm": "#FFBF79",
                "ep_comm": "#E45756", "pp_comm": "#B279A2", "dp_comm": "#54A24B", "bubble": "#BAB0AC",
                "optimizer": "#D62728", "other": "#79706E", "stragglers": "#FF9DA6"}
_MEM_COLORS = {"weights": "#4C78A8", "gradients": "#F58518", "optimizer": "#54A24B", "activations": "#E45756",
               "other": "#BAB0AC"}
_TL_COLORS = {"forward": "#4C78A8", "backward": "#F58518", "optimizer": "#D62728", "grad_sync": "#54A24B",
              "param_gather": "#B279A2"}
_TL_LABELS = {"forward": "forward (micro-batch)", "backward": "backward (micro-batch)", "optimizer": "optimizer",
              "grad_sync": "DP gradient sync", "param_gather": "DP parameter all-gather"}


def _gib(x: float) -> str:
    return f"{x / _GIB:,.1f} GiB"


def _dur(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "never"
    return format_duration(seconds)


def _tokens_text(t: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if t >= scale:
            return f"{t / scale:,.4g}{unit}"
    return f"{t:,.0f}"


def require_plotly():
    """plotly, or a one-line error naming the fix."""
    try:
        import plotly  # noqa: F401
        import plotly.graph_objects as go
        from plotly.offline import get_plotlyjs  # noqa: F401
    except ImportError:
        raise ClusterTwinError("report", "the HTML report needs plotly, which is not installed",
                               "pip install 'clustertwin[report]'") from None
    return go


_CSS = """
*{box-sizing:border-box}
body{margin:0;font-family:-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,"Noto Sans","Liberation Sans",sans-serif;
color:#1f2328;background:#f6f7f9;font-size:15px;line-height:1.45}
main{max-width:1360px;margin:0 auto;padding:18px 22px 28px}
header{background:#fff;border:1px solid #e3e6ea;border-radius:10px;padding:16px 20px 14px;margin-bottom:14px}
h1{font-size:24px;margin:0 0 2px}
h1 .sub{font-weight:400;color:#57606a}
.plan{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace;font-size:13.5px;color:#24292f;
margin:4px 0 10px;word-break:break-all}
.plan .src{font-family:inherit;color:#57606a}
.cards{display:grid;grid-template-columns:repeat(7,1fr);gap:10px}
.card{background:#f6f8fa;border:1px solid #e3e6ea;border-radius:8px;padding:8px 10px}
.card .k{font-size:12px;color:#57606a;text-transform:uppercase;letter-spacing:.04em}
.card .v{font-size:22px;font-weight:600;white-space:nowrap}
.card .d{font-size:12px;color:#57606a}
.card.bad .v{color:#c62828}.card.good .v{color:#2e7d32}
.limit{margin:10px 0 0;font-size:13.5px;color:#3b434b}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:14px}
section{background:#fff;border:1px solid #e3e6ea;border-radius:10px;padding:12px 16px 6px;margin-bottom:14px;min-width:0}
h2{font-size:18px;margin:0 0 2px}
.caption{font-size:13px;color:#57606a;margin:0 0 4px}
.note{font-size:13px;color:#8a5300;background:#fff8e6;border:1px solid #f3d58a;border-radius:6px;padding:8px 10px;margin:8px 0}
footer{font-size:12px;color:#6e7781;text-align:center;margin-top:6px}
"""

_CONFIG = {"displaylogo": False, "responsive": True,
           "modeBarButtonsToRemove": ["lasso2d", "select2d", "autoScale2d"]}


def _layout(fig, height: int, **kw) -> None:
    fig.update_layout(template="plotly_white", height=height, margin=dict(l=70, r=24, t=36, b=50),
                      font=dict(size=13, family='-apple-system, "Segoe UI", Roboto, Arial, "Liberation Sans", sans-serif'),
                      hoverlabel=dict(font_size=12), legend=dict(orientation="h", yanchor="bottom", y=1.02,
                                                                 xanchor="left", x=0), **kw)


def _div(fig, key: str, height: int) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, config=_CONFIG, div_id=f"view-{key}",
                       default_height=f"{height}px", default_width="100%")


def _section(key: str, caption: str, body: str, note: str | None = None) -> str:
    n = f'<p class="note">{html.escape(note)}</p>' if note else ""
    return (f'<section id="{key}"><h2>{html.escape(VIEWS[key])}</h2><p class="caption">{html.escape(caption)}</p>'
            f"{n}{body}</section>")


def _fmt_s(seconds: float) -> str:
    return format_duration(seconds)


# ---- the views ----------------------------------------------------------------------------------
def _view_breakdown(go, d: dict) -> str:
    b = d["breakdown_s"]
    total = d["summary"]["step_time_s"]
    parts = [(k, v) for k, v in b.items() if v > 0]
    names = [k.replace("_", " ") for k, _ in parts][::-1]
    vals = [v for _, v in parts][::-1]
    fig = go.Figure(go.Bar(
        x=vals, y=names, orientation="h", marker_color=[_PART_COLORS.get(k, "#888") for k, _ in parts][::-1],
        text=[f"{_fmt_s(v)} · {v / total * 100:.1f}%" for v in vals], textposition="outside", cliponaxis=False,
        hovertemplate="%{y}: %{x:.4g} s<extra></extra>"))
    h = 120 + 38 * len(parts)
    _layout(fig, max(h, 300), showlegend=False)
    fig.update_layout(margin=dict(l=90, r=110, t=36, b=50))
    fig.update_xaxes(title_text="seconds per step", rangemode="tozero")
    zero = [k.replace("_", " ") for k, v in b.items() if v <= 0]
    cap = (f"Where the {_fmt_s(total)} step goes; the parts sum to it (exposed communication only)."
           + (f" Zero: {', '.join(zero)}." if zero else ""))
    return _section("breakdown", cap, _div(fig, "breakdown", max(h, 300)))


def _view_memory(go, d: dict) -> str:
    m = d["memory"]
    hbm = m["hbm_bytes"]
    stages = m["stages"]
    xs = [str(s["stage"]) for s in stages]
    fig = go.Figure()
    parts = list(stages[0]["breakdown_bytes"])
    for part in parts:
        ys = [s["breakdown_bytes"].get(part, 0.0) / _GIB for s in stages]
        fig.add_trace(go.Bar(x=xs, y=ys, name=part, marker_color=_MEM_COLORS.get(part, "#888"),
                             hovertemplate=f"{part}: %{{y:.2f}} GiB<extra>stage %{{x}}</extra>"))
    tops = [s["total_bytes"] / _GIB for s in stages]
    if len(stages) <= 8:
        fig.add_trace(go.Scatter(x=xs, y=tops, mode="text", text=[f"{t:.1f} GiB" for t in tops],
                                 textposition="top center", showlegend=False, hoverinfo="skip"))
    fig.add_hline(y=hbm / _GIB, line=dict(color="#c62828", dash="dash", width=2))
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=f"HBM {hbm / _GIB:.0f} GiB",
                             line=dict(color="#c62828", dash="dash", width=2)))
    fig.update_xaxes(title_text="pipeline stage", type="category")
    h = 330 + 20 * len(parts) // 3
    _layout(fig, h, barmode="stack", bargap=0.35 if len(stages) > 1 else 0.6)
    fig.update_layout(legend=dict(orientation="v", traceorder="reversed", x=1.02, xanchor="left", y=1, yanchor="top"),
                      margin=dict(l=70, r=24, t=40, b=50))
    fig.update_yaxes(title_text="GiB per GPU", range=[0, max(hbm, max(s["total_bytes"] for s in stages)) / _GIB * 1.12])
    fits = "fits" if d["summary"]["fits"] else "does NOT fit"
    cap = (f"Most loaded: stage {m['critical_stage']}, {_gib(m['total_bytes'])} of {_gib(hbm)} "
           f"({m['total_bytes'] / hbm * 100:.0f}%): {fits}.")
    return _section("memory", cap, _div(fig, "memory", h))


def _view_landscape(go, d: dict) -> str:
    from plotly.subplots import make_subplots
    s = d["search"]
    chosen = s["chosen"]
    if s.get("status") != "ok":
        return _section("landscape", "Step time against memory per GPU and against GPUs for every feasible plan.",
                        "", note=s.get("note"))
    n = s["num_gpus"]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.64, 0.36], horizontal_spacing=0.09,
                        subplot_titles=(f"step time against memory per GPU, {n:,} GPUs",
                                        "step time against GPUs (fastest plan per size)"))
    sm = s.get("sample")
    if sm and sm["size"]:
        fig.add_trace(go.Scatter(
            x=[v / _GIB for v in sm["memory_bytes"]], y=sm["step_time_s"], mode="markers",
            name=f"feasible plans ({sm['size']:,}" + (f" of {sm['of']:,})" if sm["method"] == "uniform" else ")"),
            marker=dict(size=4, color="#6b8fbf", opacity=0.35, line=dict(width=0)), text=sm["plan_text"],
            hovertemplate="%{text}<br>%{y:.4g} s · %{x:.1f} GiB<extra></extra>"), row=1, col=1)
    fr = s.get("memory_front")
    if fr and fr["step_time_s"]:
        fig.add_trace(go.Scatter(
            x=[v / _GIB for v in fr["memory_bytes"]], y=fr["step_time_s"], mode="lines+markers", line_shape="hv",
            name="front: fastest for its memory", line=dict(color="#E45756", width=2), marker=dict(size=6),
            text=fr["plan_text"], hovertemplate="%{text}<br>%{y:.4g} s · %{x:.1f} GiB<extra>front</extra>"),
            row=1, col=1)
    plans = s["plans"]
    if plans:
        fig.add_trace(go.Scatter(
            x=[p["memory_per_gpu_bytes"]["total"] / _GIB for p in plans], y=[p["step_time_s"] for p in plans],
            mode="markers", name=f"best {len(plans)} by {s['objective']}",
            marker=dict(symbol="diamond", size=9, color="#F58518", line=dict(color="#222", width=1)),
            text=[f"#{p['rank']} {p['plan_text']}" for p in plans],
            hovertemplate="%{text}<br>%{y:.4g} s · %{x:.1f} GiB<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(
        x=[chosen["memory_bytes"] / _GIB], y=[chosen["step_time_s"]], mode="markers", name="chosen plan",
        marker=dict(symbol="star", size=18, color="#FFD700", line=dict(color="#222", width=1.5)),
        text=[chosen["plan_text"]], hovertemplate="chosen: %{text}<br>%{y:.4g} s · %{x:.1f} GiB<extra></extra>"),
        row=1, col=1)
    fig.add_vline(x=s["memory_limit_bytes"] / _GIB, line=dict(color="#c62828", dash="dash", width=1.5), row=1, col=1,
                  annotation_text="memory limit", annotation_position="top left", annotation_font_color="#c62828")
    # GPUs
    pts = [p for p in s["pareto"] if p.get("step_time_s") is not None]
    if pts:
        pts.sort(key=lambda p: p["num_gpus"])
        front = [p for p in pts if p["on_front"]]
        fig.add_trace(go.Scatter(
            x=[p["num_gpus"] for p in front], y=[p["step_time_s"] for p in front], mode="lines",
            line=dict(color="#E45756", width=2), name="Pareto front (GPUs)", showlegend=False,
            hoverinfo="skip"), row=1, col=2)
        fig.add_trace(go.Scatter(
            x=[p["num_gpus"] for p in pts], y=[p["step_time_s"] for p in pts], mode="markers+text",
            marker=dict(size=11, color=["#E45756" if p["on_front"] else "#fff" for p in pts],
                        line=dict(color="#E45756", width=2)),
            text=[f"{p['gpu_hours_per_step']:.3g} GPU-h/step" for p in pts], textposition="bottom center",
            textfont=dict(size=11), name="fastest per GPU count (filled: on the front)", showlegend=False,
            customdata=[p["plan_text"] for p in pts],
            hovertemplate="%{x:,} GPUs: %{customdata}<br>%{y:.4g} s/step<extra></extra>"), row=1, col=2)
    fig.add_trace(go.Scatter(
        x=[chosen["num_gpus"]], y=[chosen["step_time_s"]], mode="markers", showlegend=False,
        marker=dict(symbol="star", size=18, color="#FFD700", line=dict(color="#222", width=1.5)),
        text=[chosen["plan_text"]], hovertemplate="chosen: %{text}<br>%{y:.4g} s<extra></extra>"), row=1, col=2)
    gpus = sorted({p["num_gpus"] for p in s["pareto"]} | {chosen["num_gpus"]})
    fig.update_xaxes(type="log", tickvals=gpus, ticktext=[f"{g:,}" for g in gpus], title_text="GPUs", row=1, col=2,
                     range=[math.log10(min(gpus) / 1.6), math.log10(max(gpus) * 1.6)])
    ys = [chosen["step_time_s"]] + [p["step_time_s"] for p in pts]
    fig.update_yaxes(range=[0, max(ys) * 1.25], title_text="step time (s)", row=1, col=2)
    fig.update_xaxes(title_text="memory per GPU (GiB, most loaded stage)", row=1, col=1)
    fig.update_yaxes(title_text="step time (s)", row=1, col=1)
    all_t = (sm["step_time_s"] if sm else []) + [p["step_time_s"] for p in plans] + [chosen["step_time_s"]]
    if all_t and max(all_t) / max(min(all_t), 1e-12) > 12:
        tv = _log_ticks(min(all_t), max(all_t))
        fig.update_yaxes(type="log", tickvals=tv, ticktext=[f"{v:g}" for v in tv], row=1, col=1)
    h = 500
    _layout(fig, h)
    fig.update_layout(legend=dict(y=1.09), margin=dict(l=70, r=24, t=70, b=50))
    for a in fig.layout.annotations:
        if a.text and a.text.startswith("step time against"):
            a.font = dict(size=13, color="#3b434b")
    pruned = sum(s["pruned"].values())
    cap = (f"{s['evaluated']:,} plans enumerated in {s['elapsed_s']:.2f} s: {pruned:,} pruned, {s['feasible']:,} fit. "
           f"Left: {s.get('note', '')}. Right: the fastest plan at each GPU count of the search's Pareto view "
           "(filled: on the front of step time against GPU-hours). "
           f"★ the chosen plan" + (f" (#{chosen['rank']} of the search)" if chosen.get("rank") else "") + ".")
    return _section("landscape", cap, _div(fig, "landscape", h),
                    note=None if sm else s.get("note"))


def _log_ticks(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks (1-2-3-5 over less than two decades) from lo to hi."""
    mant = (1, 2, 3, 5) if hi / lo < 100 else (1, 2, 5)
    out = []
    for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1):
        for m in mant:
            v = float(f"{m * 10.0 ** e:.12g}")
            if lo / 1.15 <= v <= hi * 1.15:
                out.append(v)
    return out


def _duration_ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    cands = [1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 3 * 3600, 6 * 3600, 12 * 3600, 86400,
             2 * 86400, 7 * 86400, 14 * 86400, 30 * 86400, 90 * 86400, 365 * 86400]
    vals = [v for v in cands if lo <= v <= hi]
    if len(vals) > 9:
        vals = vals[:: math.ceil(len(vals) / 9)]

    def label(v: float) -> str:
        if v < 60:
            return f"{v:g} s"
        if v < 3600:
            return f"{v / 60:g} min"
        if v < 86400:
            return f"{v / 3600:g} h"
        return f"{v / 86400:g} d"
    return vals, [label(v) for v in vals]


def _view_goodput(go, d: dict) -> str:
    g = d["goodput"]
    if not g or "sweep" not in g:
        return _section("goodput", "Expected goodput (ideal time / expected time) for each checkpoint interval.", "",
                        note=(g or {}).get("error", "goodput was not computed"))
    sw = g["sweep"]
    ck = g["checkpoint"]
    fig = go.Figure()
    dashes = {"sync": "dot", "async": "dash", "async-serialized": "longdash", "in-memory": "dashdot"}
    for mode, o in (g.get("other_modes") or {}).items():
        fig.add_trace(go.Scatter(x=o["sweep"]["interval_s"], y=[v * 100 for v in o["sweep"]["goodput"]], mode="lines",
                                 name=f"{mode} checkpoints (best {o['goodput'] * 100:.1f}%)",
                                 line=dict(width=1.5, dash=dashes.get(mode, "dash"), color="#9aa4ae"),
                                 hovertemplate=f"{mode}: every %{{x:.3s}}s → %{{y:.2f}}%<extra></extra>"))
    fig.add_trace(go.Scatter(x=sw["interval_s"], y=[v * 100 for v in sw["goodput"]], mode="lines",
                             name=f"{ck['mode']} checkpoints (this run)", line=dict(width=3, color="#4C78A8"),
                             hovertemplate="every %{x:.3s}s → %{y:.2f}%<extra></extra>"))
    marks = [("chosen" if g["checkpoint_interval_source"] == "given" else "optimal", g["checkpoint_interval_s"],
              g["goodput"], "circle", "#4C78A8")]
    xs, ys = np.asarray(sw["interval_s"]), np.asarray(sw["goodput"])
    for name, x, color, sym in (("Young", ck.get("young_interval_s"), "#54A24B", "triangle-up"),
                                ("Daly", ck.get("daly_interval_s"), "#B279A2", "square")):
        if x and xs.size and xs[0] <= x <= xs[-1]:
            marks.append((name, x, float(np.interp(x, xs, ys)), sym, color))
    labelled: list[float] = [marks[0][1]]
    for i, (name, x, y, sym, color) in enumerate(marks[1:] + marks[:1]):
        primary = i == len(marks) - 1
        show = primary or all(abs(math.log(x / o)) > 0.25 for o in labelled)
        if show and not primary:
            labelled.append(x)
        fig.add_trace(go.Scatter(x=[x], y=[y * 100], mode="markers+text" if show else "markers",
                                 name=f"{name}: every {_dur(x)}",
                                 marker=dict(size=12 if name in ("optimal", "chosen") else 10, symbol=sym, color=color,
                                             line=dict(color="#222", width=1)),
                                 text=[name], textposition="bottom center" if name in ("optimal", "chosen") else "top center",
                                 hovertemplate=f"{name}: every {_dur(x)} → %{{y:.2f}}%<extra></extra>"))
    tv, tt = _duration_ticks(float(xs.min()), float(xs.max()))
    fig.update_xaxes(type="log", title_text="checkpoint interval", tickvals=tv, ticktext=tt,
                     range=[math.log10(float(xs.min())), math.log10(float(xs.max()))])
    x_lo, x_hi = float(xs.min()), float(xs.max())
    allg = [v * 100 for v in sw["goodput"]]
    for o in (g.get("other_modes") or {}).values():
        allg += [v * 100 for x, v in zip(o["sweep"]["interval_s"], o["sweep"]["goodput"]) if x_lo <= x <= x_hi]
    top, low = max(allg), min(allg)
    span = max(top - low, 0.5)
    fig.update_yaxes(title_text="goodput (%)", range=[max(0.0, low - 0.06 * span), min(100.0, top + 0.25 * span)])
    h = 400
    _layout(fig, h)
    fig.update_layout(margin=dict(l=70, r=24, t=60, b=50))
    lost = ", ".join(f"{k} {_dur(v)}" for k, v in g["lost_s"].items() if v)
    cap = (f"{_tokens_text(g['tokens'])} tokens in {g['steps']:,} steps: ideal {_dur(g['ideal_time_to_train_s'])}, "
           f"expected {_dur(g['expected_time_to_train_s'])} (goodput {g['goodput'] * 100:.1f}%). "
           f"Failures every {_dur(g['mtbf_s'])} ({g['failure_model']}); a {ck['mode']} checkpoint "
           f"stalls {_dur(ck['blocking_s'])}. Lost: {lost}.")
    note = None if g.get("tokens_source") == "given" else f"tokens: {g.get('tokens_source')}"
    return _section("goodput", cap, _div(fig, "goodput", h), note=note)


def _view_timeline(go, d: dict) -> str:
    tl = d["timeline"]
    step = tl["step_time_s"]
    scale, unit = (1e3, "ms") if step < 2 else (1.0, "s")
    fig = go.Figure()
    lanes = {"forward": (-0.36, 0.56), "backward": (-0.36, 0.56), "optimizer": (-0.36, 0.56),
             "grad_sync": (0.24, 0.16), "param_gather": (0.24, 0.16)}
    n_bars = sum(len(s["bars"]) for s in tl["stages"])
    for kind in ("forward", "backward", "optimizer", "grad_sync", "param_gather"):
        bars = [(s["stage"], b) for s in tl["stages"] for b in s["bars"] if b["kind"] == kind]
        if not bars:
            continue
        off, width = lanes[kind]
        label = kind in ("forward", "backward") and n_bars <= 2500
        fig.add_trace(go.Bar(
            orientation="h", y=[st for st, _ in bars], x=[(b["end_s"] - b["start_s"]) * scale for _, b in bars],
            base=[b["start_s"] * scale for _, b in bars], offset=off, width=width, name=_TL_LABELS[kind],
            marker=dict(color=_TL_COLORS[kind],
                        line=dict(color="#ffffff", width=0.6 if width > 0.3 and n_bars <= 1500 else 0)),
            text=[str(b["microbatch"]) for _, b in bars] if label else None, textposition="inside",
            insidetextanchor="middle", textfont=dict(size=10, color="#fff"),
            customdata=[[b["name"] + (f" ({b['count']} collectives)" if b.get("count", 1) > 1 else ""),
                         b["start_s"] * scale, (b["end_s"] - b["start_s"]) * scale] for _, b in bars],
            hovertemplate=f"stage %{{y}}: %{{customdata[0]}}<br>start %{{customdata[1]:.4g}} {unit}, "
                          f"%{{customdata[2]:.4g}} {unit}<extra></extra>"))
    pp = tl["pp"]
    fig.add_vline(x=step * scale, line=dict(color="#222", dash="dot", width=1.2))
    fig.add_annotation(x=step * scale, y=1.0, xref="x", yref="paper", yanchor="bottom", xanchor="right",
                       showarrow=False, text=f"end of step: {_fmt_s(step)}", font=dict(size=12))
    h = 150 + 62 * pp
    _layout(fig, h, barmode="overlay", uniformtext=dict(minsize=8, mode="hide"))
    fig.update_layout(margin=dict(l=80, r=24, t=56, b=50))
    fig.update_yaxes(tickvals=list(range(pp)), ticktext=[f"stage {i}" for i in range(pp)], autorange="reversed",
                     range=[pp - 0.5, -0.5], zeroline=False, showgrid=False)
    fig.update_xaxes(title_text=f"time in the iteration ({unit})", range=[0, step * scale * 1.01])
    cap = (f"Discrete-event replay of one iteration ({tl['num_microbatches']} micro-batches per stage, pp={pp}"
           + (f", vpp={tl['vpp']}" if tl["vpp"] > 1 else "") + f"): {_fmt_s(step)} against the analytic "
           f"{_fmt_s(tl['analytic_step_time_s'])}"
           + (f" ({_fmt_s(tl['analytic_step_time_s'] - tl['analytic_stragglers_s'])} without the wait for the "
              "slowest GPU, which the replay, every GPU at the mean speed, leaves out)"
              if tl.get("analytic_stragglers_s", 0.0) > 0 else "")
           + ". One row per pipeline stage: compute above (numbers are "
           "micro-batches), data-parallel communication below; pipeline sends are left out.")
    return _section("timeline", cap, _div(fig, "timeline", h))


# ---- the header and the page --------------------------------------------------------------------
def _card(key: str, value: str, detail: str = "", cls: str = "") -> str:
    return (f'<div class="card {cls}"><div class="k">{html.escape(key)}</div><div class="v">{html.escape(value)}</div>'
            f'<div class="d">{html.escape(detail)}</div></div>')


def _header(d: dict) -> str:
    j, s = d["job"], d["summary"]
    hbm = s["hbm_bytes"]
    cards = [
        _card("step time", _fmt_s(s["step_time_s"]), f"{s['num_microbatches']} micro-batches"),
        _card("tokens/s", f"{s['tokens_per_s'] / 1e3:,.0f}k" if s["tokens_per_s"] >= 1e4 else f"{s['tokens_per_s']:,.0f}",
              f"{s['tokens_per_s'] / j['num_gpus']:,.0f} per GPU"),
        _card("MFU", f"{s['mfu'] * 100:.1f}%", f"{s['tflops_per_gpu']:,.0f} TFLOP/s per GPU"),
        _card("memory / GPU", _gib(s["memory_per_gpu_bytes"]), f"of {_gib(hbm)} HBM"),
        _card("fits", "yes" if s["fits"] else "NO", f"{s['memory_per_gpu_bytes'] / hbm * 100:.0f}% of HBM",
              "good" if s["fits"] else "bad"),
        _card("goodput", f"{s['goodput'] * 100:.1f}%" if s["goodput"] is not None else "n/a",
              "failures, checkpoints, stragglers"),
        _card("time to train", _dur(s["expected_time_to_train_s"]) if s["expected_time_to_train_s"] else "n/a",
              f"{_tokens_text(j['tokens'])} tokens" + ("" if j["tokens_source"] == "given" else " (default)")),
    ]
    src = j["plan_source"]
    return (f"<header><h1>{html.escape(j['model'])} <span class=\"sub\">on {j['num_gpus']:,} × "
            f"{html.escape(j['gpu'])} ({html.escape(j['cluster'])})</span></h1>"
            f"<p class=\"plan\">{html.escape(j['plan_text'])} <span class=\"src\">· seq {j['seq_len']:,} · global batch "
            f"{j['global_batch']:,} · {html.escape(j['precision'])} · {html.escape(j['framework'])} · plan: "
            f"{html.escape(src)}</span></p>"
            f"<div class=\"cards\">{''.join(cards)}</div>"
            f"<p class=\"limit\"><b>What limits it:</b> {html.escape(s['bottleneck'])}</p></header>")


def _json_for_script(data: dict) -> str:
    text = json.dumps(data, separators=(",", ":"), default=float, allow_nan=False)
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def render_html(data: dict[str, Any]) -> str:
    """The page for ``data`` (``build_report``'s dict): self-contained, plotly embedded."""
    go = require_plotly()
    from plotly.offline import get_plotlyjs
    j = data["job"]
    views = [_view_breakdown(go, data), _view_memory(go, data)]
    body = (f'<div class="grid">{views[0]}{views[1]}</div>' + _view_landscape(go, data) + _view_goodput(go, data)
            + _view_timeline(go, data))
    title = f"clustertwin report: {j['model']} on {j['num_gpus']:,} x {j['gpu']}"
    import plotly
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(title)}</title><style>{_CSS}</style>"
            f"<script type=\"text/javascript\">/* plotly.js {plotly.__version__} (embedded) */\n{get_plotlyjs()}</script>"
            f"</head><body><main>{_header(data)}{body}"
            f"<footer>clustertwin {html.escape(str(data.get('clustertwin', '')))} · predicted from specs · "
            f"the data of this page: <code>clustertwin report ... --json FILE</code> "
            f"(also embedded below as JSON, id clustertwin-data)</footer></main>"
            f"<script type=\"application/json\" id=\"clustertwin-data\">{_json_for_script(data)}</script>"
            "</body></html>\n")


def embedded_data(page: str) -> dict[str, Any]:
    """The data a page was rendered from (its ``clustertwin-data`` script)."""
    start_tag = '<script type="application/json" id="clustertwin-data">'
    i = page.find(start_tag)
    if i < 0:
        raise DataError("report", "no embedded data in this page", "render it with clustertwin report")
    i += len(start_tag)
    k = page.find("</script>", i)
    return json.loads(page[i:k].replace("<\\/", "</").replace("<\\!--", "<!--"))


__all__ = ["render_html", "embedded_data", "require_plotly"]
