"""The figures docs/goodput.md and docs/trace.md quote, computed: each block between
``<!-- figures:NAME -->`` and ``<!-- /figures:NAME -->`` in those files is what this script prints
for NAME, so a change to the model is followed by ``--write`` rather than by hand.

    python docs/scripts/doc_figures.py                 # print every block
    python docs/scripts/doc_figures.py --check         # exit 1 if a doc differs from its block
    python docs/scripts/doc_figures.py --write         # rewrite the blocks in the docs

Each block takes a few seconds (predict, estimate_goodput, one replay per row); tests/test_doc_figures.py
checks them. Figures that need a search over thousands of GPUs (goodput.md's "Through search"
paragraph) or the disk (trace.md's trace-writing speed, benchmarks/trace_speed.py) are not here.
"""
from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
DAY = 86400.0


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def _llama3_405b():
    from clustertwin import predict
    return predict("llama3.1-405b", cluster="meta-llama3-24k", num_gpus=16384,
                   plan="tp=8,pp=16,vpp=4,dp=128,cp=1,sp=1,zero=1", micro_batch=1, global_batch=2048, seq_len=8192)


def llama3_405b_result() -> str:
    """goodput.md: the Llama 3 405B scenario's result and its sensitivity to one change at a time."""
    from clustertwin.reliability import estimate_goodput
    p = _llama3_405b()
    g = estimate_goodput(p, 15.6e12)
    lost = {k: v / g.expected_time_to_train_s for k, v in g.lost_s.items()}
    ck = g.checkpoint
    lines = [
        f"Checkpoints as stated: weights + optimizer = {ck.bytes_total / 1e12:.2f} TB "
        f"({ck.bytes_total / 16384 / 1e9:.2f} GB per GPU), {ck.save_s:.1f} s per save, every "
        f"{g.checkpoint_interval_steps:,} steps ({g.checkpoint_interval_s / 60:.1f} min, the optimum; Young "
        f"{g.young_interval_s / 60:.2f} min); a restart takes {g.restart.mean_s / 60:.1f} min on average.",
        "",
        f"Result: predicted step {p.step_time_s:.2f} s, of which {p.breakdown_s['stragglers']:.2f} s waiting for the "
        f"slowest GPU ({p.mean_gpu_step_time_s:.2f} s at the mean speed); ideal {g.ideal_time_to_train_s / DAY:.1f} days, expected "
        f"**{g.expected_time_to_train_s / DAY:.1f} days**; {g.expected_failures:,.0f} unplanned + "
        f"{g.expected_planned_interruptions:,.0f} planned interruptions; **effective training time "
        f"{_pct(g.effective_training_time_ratio)}** (paper: \"higher than 90%\"); goodput {_pct(g.goodput)} "
        f"(stragglers take {_pct(g.straggler_slowdown)} more). Where the time goes: restarts "
        f"{_pct(lost['restart'])} of the elapsed time, rework {_pct(lost['rework'])}, checkpoint stalls "
        f"{_pct(lost['checkpointing'])}, stragglers {_pct(lost['stragglers'])}.",
        "",
        "Sensitivity (same inputs, one change):",
        "",
        "| change | effective training time | goodput |",
        "|---|---:|---:|",
    ]
    changes: list[tuple[str, dict]] = [
        ("none", {}),
        ("detection and rescheduling 10 min each (Kokolis et al.'s 20-min restart)",
         dict(detection_s=600, reschedule_s=600)),
        ("detection and rescheduling 2 min each", dict(detection_s=120, reschedule_s=120)),
        ("32 hot spares", dict(hot_spares=32)),
        ("async checkpoints", dict(checkpoint_mode="async")),
        ("checkpoints at Tectonic's 7 TB/s peak", dict(storage_write_bandwidth_bytes_per_s=7e12)),
        ("stock Megatron-LM initialisation (1,047 s)", dict(init_s=1047)),
        ("hourly checkpoints instead of the optimum", dict(checkpoint_interval_s=3600)),
        ("Kokolis et al.'s RSC-1 failure rate", dict(failure_model="kokolis-rsc1")),
    ]
    for name, opts in changes:
        e = estimate_goodput(p, 15.6e12, **opts)
        lines.append(f"| {name} | {_pct(e.effective_training_time_ratio)} | {_pct(e.goodput)} |")
    return "\n".join(lines)


def failures_change_the_plan() -> str:
    """goodput.md: plans A and B of Llama 3 70B on 2,048 H100s, legacy checkpoints on a slow path."""
    from clustertwin import predict
    from clustertwin.reliability import estimate_goodput
    from clustertwin.units import format_duration
    scenario = dict(checkpoint_writers="dp-rank-0", node_storage_bandwidth_bytes_per_s="25Gbps",
                    failure_model="opt-175b")
    rows = [("A", "tp=8,pp=1,sp=1,zero=1,recompute=full"), ("B", "tp=8,pp=16,sp=1,zero=1,recompute=selective")]
    got = []
    for name, plan in rows:
        p = predict("llama3-70b", gpu="h100", num_gpus=2048, plan=plan, micro_batch=1, global_batch=1024,
                    seq_len=8192)
        got.append((name, plan, p, estimate_goodput(p, 2e12, **scenario)))
    fast = min(got, key=lambda x: x[2].step_time_s)[0]
    soon = min(got, key=lambda x: x[3].expected_time_to_train_s)[0]
    lines = ["| plan | step | ideal | checkpoint save (writer nodes) | interval | expected | goodput |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, plan, p, g in got:
        step = f"{p.step_time_s:.2f} s"
        expected = f"{g.expected_time_to_train_s / DAY:.1f} days"
        lines.append(f"| {name} `{plan}` | {'**' + step + '**' if name == fast else step} | "
                     f"{g.ideal_time_to_train_s / DAY:.1f} days | {format_duration(g.checkpoint.save_s)} "
                     f"({p.job.plan.pp}) | {format_duration(g.checkpoint_interval_s)} | "
                     f"{'**' + expected + '**' if name == soon else expected} | {_pct(g.goodput)} |")
    lines += ["", f"Best by step time: {fast}. Best by expected time-to-train: {soon}."]
    return "\n".join(lines)


def slow_gpu() -> str:
    """trace.md: one GPU 10% slower in each stage of Llama 3 70B on 64 H100s (tp=4, pp=4, dp=4)."""
    from clustertwin.jobs import make_training_job
    from clustertwin.sim import simulate
    job = make_training_job("llama3-70b", gpu="h100", num_gpus=64, plan="tp=4,pp=4,dp=4,sp=1", micro_batch=1,
                            global_batch=64, seq_len=4096)
    base = simulate(job).step_time_s
    lines = [f"| slow GPU | stage | step ({base:.2f} s without it) |", "|---|---|---|"]
    for rank, stage in ((0, "0"), (16, "1"), (32, "2"), (63, "3 (with the LM head)")):
        t = simulate(job, slow_rank=rank, slowdown=1.1, baseline=False).step_time_s
        lines.append(f"| rank {rank} | {stage} | {t:.2f} s ({(t / base - 1) * 100:+.1f}%) |")
    return "\n".join(lines)


def policies_llama3_405b() -> str:
    """goodput.md: every resilience policy on the Llama 3 405B scenario, fleet llama3-16k (Monte Carlo 100 runs)."""
    from clustertwin.reliability import compare_policies
    res = compare_policies(_llama3_405b(), 15.6e12, runs=100, seed=2024, fleet="llama3-16k")
    lines = ["| policy | goodput | effective training time | goodput p10-p90 | time p50 | restart | interval | "
             "spare GPUs | host memory / node | GPU-hours |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res:
        e = r.estimate
        mc = e.monte_carlo
        mem = f"{e.policy.host_memory_bytes_per_node / 1e9:.2f} GB" if e.policy.host_memory_bytes_per_node else "0"
        lines.append(f"| `{r.policy}` | {_pct(e.goodput)} | {_pct(e.effective_training_time_ratio)} | "
                     f"{mc.goodput_p10 * 100:.1f}-{mc.goodput_p90 * 100:.1f}% | {mc.p50_s / DAY:.1f} d | "
                     f"{e.restart_time_s / 60:.1f} min | {e.checkpoint_interval_s / 60:.1f} min | "
                     f"{e.policy.spare_gpus} | {mem} | {e.gpu_hours / 1e6:.2f}M |")
    return "\n".join(lines)


def resilience_published() -> str:
    """goodput.md: the published resilience figures (data/validation/resilience_published.csv) against the model."""
    import csv
    import importlib.util
    spec = importlib.util.spec_from_file_location("test_resilience", ROOT / "tests" / "test_resilience.py")
    mod = importlib.util.module_from_spec(spec)   # type: ignore[arg-type]
    spec.loader.exec_module(mod)                  # type: ignore[union-attr]
    lines = ["| id | figure | published | model | error |", "|---|---|---:|---:|---:|"]
    with open(ROOT / "data" / "validation" / "resilience_published.csv", newline="") as f:
        for row in csv.DictReader(f):
            got = mod._model_value(row["id"])
            unit = row["unit"]
            pub = (row["published"] if row["published"] else
                   f"{row['published_low']}-{row['published_high']}" if row["published_low"] and row["published_high"]
                   else f"> {row['published_low']}" if row["published_low"] else f"< {row['published_high']}")
            if got is None:
                model, err = "-", "see below"
            else:
                model = f"{got:.4g}"
                if row["published"]:
                    p = float(row["published"])
                    err = f"{(got - p) * 100:+.1f} points" if unit in ("ratio", "fraction") else f"{(got / p - 1) * 100:+.1f}%"
                else:
                    lo = float(row["published_low"]) if row["published_low"] else -math.inf
                    hi = float(row["published_high"]) if row["published_high"] else math.inf
                    err = "within" if lo <= got <= hi else "outside"
            lines.append(f"| `{row['id']}` | {row['quantity']} ({unit}) | {pub} | {model} | {err} |")
    return "\n".join(lines)


BLOCKS: dict[str, tuple[str, Callable[[], str]]] = {
    "llama3-405b": ("docs/goodput.md", llama3_405b_result),
    "policies-llama3-405b": ("docs/goodput.md", policies_llama3_405b),
    "resilience-published": ("docs/goodput.md", resilience_published),
    "failures-change-the-plan": ("docs/goodput.md", failures_change_the_plan),
    "slow-gpu": ("docs/trace.md", slow_gpu),
}


def _pattern(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- figures:{re.escape(name)} -->\n)(.*?)(\n<!-- /figures:{re.escape(name)} -->)", re.S)


def in_doc(name: str) -> str:
    """The block NAME as the doc has it now."""
    doc, _ = BLOCKS[name]
    m = _pattern(name).search((ROOT / doc).read_text(encoding="utf-8"))
    if m is None:
        raise SystemExit(f"error: {doc}: no block figures:{name}; add the two marker comments around it")
    return m.group(2)


def write(name: str, text: str) -> None:
    doc, _ = BLOCKS[name]
    path = ROOT / doc
    src = path.read_text(encoding="utf-8")
    in_doc(name)
    path.write_text(_pattern(name).sub(lambda m: m.group(1) + text + m.group(3), src, count=1), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help=f"blocks (default: all): {', '.join(BLOCKS)}")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the blocks in the docs")
    mode.add_argument("--check", action="store_true", help="exit 1 where a doc differs")
    a = ap.parse_args(argv)
    bad = [n for n in a.names if n not in BLOCKS]
    if bad:
        sys.stderr.write(f"error: names: unknown block {bad[0]!r}; use one of {', '.join(BLOCKS)}\n")
        return 2
    differ = 0
    for name in a.names or list(BLOCKS):
        text = BLOCKS[name][1]()
        if a.write:
            write(name, text)
        elif a.check:
            if in_doc(name) != text:
                differ += 1
                sys.stderr.write(f"{BLOCKS[name][0]}: figures:{name} differs from what the model gives now\n")
        else:
            print(f"<!-- figures:{name} -->\n{text}\n<!-- /figures:{name} -->\n")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
