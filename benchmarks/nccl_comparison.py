"""The collective model against published nccl-tests measurements (data/validation/nccl_tests.csv).

    python benchmarks/nccl_comparison.py             # print the tables (markdown)
    python benchmarks/nccl_comparison.py --write docs/collectives.md   # refresh the doc's generated block

Error = model time / measured time - 1 (negative: the model is faster than the measurement).
"""
from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

from clustertwin.validate.collectives import compare, size_band, summary

CSV = Path(__file__).resolve().parents[1] / "data" / "validation" / "nccl_tests.csv"


def tables() -> str:
    rows = compare(CSV)
    out = []
    for title, key in (("per source and system", lambda r: f"{r.run_id.rsplit('-', 1)[0]} ({r.system})"),
                       ("per op and size band", lambda r: f"{r.op}, {size_band(r.nbytes)}"),
                       ("per size band", lambda r: size_band(r.nbytes))):
        out += [f"**{title}**", "", "| group | rows | median abs. error | median error | worst abs. error |",
                "|---|---:|---:|---:|---:|"]
        out += [f"| {k} | {n} | {med:.0%} | {sgn:+.0%} | {worst:.0%} |" for k, n, med, sgn, worst in summary(rows, key)]
        out.append("")
    out += ["**issue 19's bar: bus bandwidth error (model / measured - 1) per run: median and worst at >= 1 GiB, and at 16 MiB**",
            "", "| run | nodes | median >= 1 GiB | worst >= 1 GiB | 16 MiB | median within 10%, 16 MiB within 25% |",
            "|---|---:|---:|---:|---:|---|"]
    runs: dict[str, list] = {}
    for r in rows:
        runs.setdefault(r.run_id, []).append(r)
    for run_id, rs in runs.items():
        big = [r.measured_s / r.model_s - 1 for r in rs if r.nbytes >= 1 << 30]
        mid = [r.measured_s / r.model_s - 1 for r in rs if r.nbytes == 16 << 20]
        if not big and not mid:
            continue
        worst = max(big, key=abs) if big else None
        med = statistics.median(big) if big else None
        ok = (med is None or abs(med) <= 0.10) and all(abs(m) <= 0.25 for m in mid)
        out.append(f"| {run_id} | {rs[0].nodes} | {'' if med is None else f'{med:+.0%}'} | "
                   f"{'' if worst is None else f'{worst:+.0%}'} | "
                   f"{f'{mid[0]:+.0%}' if mid else ''} | {'yes' if ok else 'no'} |")
    out.append("")
    out += ["**model vs measured time at 16 MiB and at the largest size of each run**", "",
            "| run | size | measured time | model time | model algorithm/protocol | error |", "|---|---:|---:|---:|---|---:|"]
    last: dict[str, object] = {}
    for r in rows:
        if r.nbytes == 16 << 20:
            out.append(f"| {r.run_id} | 16 MiB | {r.measured_s * 1e6:,.0f} us | {r.model_s * 1e6:,.0f} us | "
                       f"{r.algorithm}/{r.protocol} | {r.error:+.0%} |")
        last[r.run_id] = r
    for r in last.values():
        out.append(f"| {r.run_id} | {r.nbytes / (1 << 20):,.0f} MiB | {r.measured_s * 1e6:,.0f} us | "  # type: ignore
                   f"{r.model_s * 1e6:,.0f} us | {r.algorithm}/{r.protocol} | {r.error:+.0%} |")  # type: ignore
    return "\n".join(out)


_BLOCK = re.compile(r"(<!-- BEGIN generated nccl -->\n)(.*?)(<!-- END generated nccl -->)", re.S)

if __name__ == "__main__":
    text = tables()
    if len(sys.argv) > 2 and sys.argv[1] == "--write":
        path = Path(sys.argv[2])
        doc = path.read_text(encoding="utf-8")
        path.write_text(_BLOCK.sub(lambda m: m.group(1) + text + "\n" + m.group(3), doc), encoding="utf-8")
    else:
        print(text)
