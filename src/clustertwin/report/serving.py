"""The serving view: one self-contained HTML page (plotly embedded) of a serving prediction: the
latency distributions of its requests (TTFT, TPOT, end-to-end) and the throughput-latency curve over
request rate. Drawn from ``clustertwin.serve.curve.serving_view_data``'s dict, embedded in the page."""
from __future__ import annotations

import html
from typing import Any

from .views import _CSS, _json_for_script, _layout, require_plotly

_COLORS = {"ttft_s": "#4C78A8", "tpot_s": "#F58518", "e2e_latency_s": "#54A24B"}
_LABELS = {"ttft_s": "TTFT", "tpot_s": "TPOT", "e2e_latency_s": "end-to-end"}


def _div(fig, key: str, height: int) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False, "responsive": True},
                       div_id=f"serve-{key}", default_height=f"{height}px", default_width="100%")


def render_serving_html(data: dict[str, Any]) -> str:
    go = require_plotly()
    from plotly.offline import get_plotlyjs
    from plotly.subplots import make_subplots
    run = data["run"]
    title = (f"{run['model']} on {run['num_gpus']} x {run['gpu']} · {run['engine']} · "
             f"tp={run['plan']['tp']} pp={run['plan']['pp']} ep={run['plan']['ep']} dp={run['plan']['dp']}")
    sections = []
    if data.get("samples"):
        fig = make_subplots(rows=1, cols=3, subplot_titles=[_LABELS[k] + " (s)" for k in _LABELS])
        for i, k in enumerate(_LABELS, start=1):
            fig.add_trace(go.Histogram(x=data["samples"].get(k, []), marker_color=_COLORS[k], name=_LABELS[k],
                                       showlegend=False), row=1, col=i)
        _layout(fig, 330)
        sections.append(("Latency distribution", f"{run['num_requests']:,} requests, {run['workload']}",
                         _div(fig, "latency", 330)))
    if data.get("curve"):
        c = data["curve"]
        fig = make_subplots(specs=[[{"secondary_y": True}]])
        x = [p["request_rate"] for p in c]
        fig.add_trace(go.Scatter(x=x, y=[p["output_tokens_per_s"] for p in c], name="output tokens/s",
                                 mode="lines+markers", line=dict(color="#79706E")), secondary_y=False)
        for k in ("ttft_s", "tpot_s"):
            for stat, dash in (("p50", "solid"), ("p99", "dash")):
                fig.add_trace(go.Scatter(x=x, y=[1e3 * p[k][stat] for p in c], name=f"{_LABELS[k]} {stat}",
                                         mode="lines+markers", line=dict(color=_COLORS[k], dash=dash)),
                              secondary_y=True)
        _layout(fig, 380, xaxis_title="request rate (requests/s, Poisson)")
        fig.update_layout(margin=dict(r=90))   # room for the latency axis on the right
        fig.update_yaxes(title_text="output tokens/s", secondary_y=False)
        fig.update_yaxes(title_text="latency (ms)", rangemode="tozero", secondary_y=True)
        cap = data.get("capacity_requests_per_s", 0.0)
        sections.append(("Throughput and latency over request rate",
                         f"offline capacity {cap:,.2f} requests/s; rates from 10% to 115% of it",
                         _div(fig, "curve", 380)))
    body = "".join(f'<section><h2>{html.escape(h)}</h2><p class="caption">{html.escape(cap)}</p>{div}</section>'
                   for h, cap, div in sections)
    import plotly
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>clustertwin serve: {html.escape(title)}</title><style>{_CSS}</style>"
            f"<script type=\"text/javascript\">/* plotly.js {plotly.__version__} (embedded) */\n{get_plotlyjs()}</script>"
            f"</head><body><main><header><h1>clustertwin serve <span class=\"sub\">{html.escape(title)}</span></h1>"
            f"<p class=\"caption\">{run['output_tokens_per_s']:,.0f} output tokens/s · TTFT p99 "
            f"{run['ttft_s']['p99']:.3g} s · TPOT p99 {run['tpot_s']['p99']:.3g} s · KV cache "
            f"{run['kv_cache_tokens']:,} tokens</p></header>{body}"
            "<footer>predicted from specs by clustertwin's serving twin</footer></main>"
            f"<script type=\"application/json\" id=\"clustertwin-data\">{_json_for_script(data)}</script>"
            "</body></html>\n")


__all__ = ["render_serving_html"]
