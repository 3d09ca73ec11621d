"""``clustertwin measure``: train a model built from its ModelSpec on one GPU and record the median
step time and peak allocated memory as rows of the validation schema.

Training as a plain PyTorch job runs it: fp32 master weights, bf16 autocast, SDPA attention, fp32
loss (cross-entropy on fp32 logits), fused AdamW; optionally torch.compile and full recomputation
(activation checkpointing per layer). Step time: CUDA events around whole steps after warm-up,
median over ``steps``; memory: ``torch.cuda.max_memory_allocated`` over the timed steps.
"""
from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DataError, SpecError
from .microbench import cuda_times
from ..specs import ModelSpec

FRAMEWORKS = ("pytorch-eager", "pytorch-compile")
RECOMPUTE = ("none", "full")
SCHEMA_COLUMNS = ("run_id", "source", "source_url", "model", "arch", "layers", "hidden", "heads", "kv_heads",
                  "ffn_hidden", "vocab", "seq_len", "moe_experts", "moe_topk", "gpu", "num_gpus", "gpus_per_node",
                  "tp", "pp", "vpp", "dp", "cp", "ep", "sp", "zero_stage", "recompute", "micro_batch",
                  "global_batch", "precision", "framework", "metric", "value", "notes")


def truncate(spec: ModelSpec, layers: int | None) -> ModelSpec:
    """The model with only its first ``layers`` layers (so that a big model fits one GPU)."""
    if layers is None or layers == spec.num_layers:
        return spec
    if layers < 1 or layers > spec.num_layers:
        raise SpecError("layers", f"{layers} is outside 1..{spec.num_layers}", "give a smaller --layers")
    # validate anew: model_copy would keep the cached parameter counts of the full model
    return ModelSpec.model_validate({**spec.model_dump(), "num_layers": layers,
                                     "name": f"{spec.name}-{layers}l"})


def arch_of(spec: ModelSpec) -> str:
    if spec.is_moe or spec.mla is not None:
        raise SpecError("model", f"{spec.name} is a mixture-of-experts or MLA model",
                        "measure builds dense gpt/llama-style models only")
    if spec.norm == "layernorm" and spec.activation == "gelu" and spec.positions == "learned":
        return "gpt"
    if spec.norm == "rmsnorm" and spec.activation == "swiglu" and spec.positions == "rope" and not spec.bias:
        return "llama"
    raise SpecError("model", f"{spec.name} is neither gpt-style (LayerNorm, GELU, learned positions) nor llama-style "
                    "(RMSNorm, SwiGLU, RoPE, no biases)", "measure a gpt- or llama-style model")


@dataclass
class Measurement:
    spec: ModelSpec
    gpu: str
    micro_batch: int
    seq_len: int
    framework: str
    recompute: str
    step_times_s: list[float]
    peak_memory_bytes: int
    device_name: str = ""
    torch: str = ""
    cuda: str = ""
    driver: str = ""
    date: str = ""

    @property
    def step_time_s(self) -> float:
        return statistics.median(self.step_times_s)


def rows_for(m: Measurement, run_id: str | None = None) -> list[dict[str, Any]]:
    """Two validation-schema rows (step time, peak memory) of one measured run."""
    s = m.spec
    run_id = run_id or (f"measure-{s.name}-{m.gpu}-mb{m.micro_batch}-s{m.seq_len}-{m.framework}-{m.recompute}"
                        f"-{m.date}")
    common = {
        "run_id": run_id, "source": f"clustertwin measure on {m.device_name or m.gpu}; torch {m.torch}, CUDA {m.cuda}, "
                                    f"driver {m.driver}; {m.date}",
        "source_url": "", "model": s.name, "arch": arch_of(s), "layers": s.num_layers, "hidden": s.hidden_size,
        "heads": s.num_heads, "kv_heads": s.kv_heads, "ffn_hidden": s.ffn_hidden_size, "vocab": s.vocab_size,
        "seq_len": m.seq_len, "moe_experts": "", "moe_topk": "", "gpu": m.gpu, "num_gpus": 1, "gpus_per_node": "",
        "tp": 1, "pp": 1, "vpp": "", "dp": 1, "cp": 1, "ep": 1, "sp": 0, "zero_stage": 0, "recompute": m.recompute,
        "micro_batch": m.micro_batch, "global_batch": m.micro_batch, "precision": "bf16", "framework": m.framework,
        "notes": (f"single GPU; fp32 master weights, bf16 autocast, SDPA (causal), fp32 loss, fused AdamW; "
                  f"dropout {s.dropout:g}; median of {len(m.step_times_s)} steps after warm-up (CUDA events); "
                  f"peak = torch.cuda.max_memory_allocated"),
    }
    return [{**common, "metric": "iteration_time_s", "value": f"{m.step_time_s:.6g}"},
            {**common, "metric": "peak_memory_bytes", "value": str(int(m.peak_memory_bytes))}]


def append_rows(path: str | Path, rows: list[dict[str, Any]]) -> Path:
    """Append rows to a validation CSV, writing the header when the file is new (its column order kept)."""
    p = Path(path)
    fields = list(SCHEMA_COLUMNS)
    if p.exists() and p.stat().st_size > 0:
        with p.open(newline="", encoding="utf-8") as f:
            header = next(csv.reader(f), None)
        if not header or "run_id" not in header:
            raise DataError("append", f"{p.name} has no validation-schema header", "give a CSV in the validation schema")
        missing = [c for c in SCHEMA_COLUMNS if c not in header]
        if missing:
            raise DataError("append", f"{p.name} lacks the column(s) {', '.join(missing)}",
                            "use the validation schema (shared/validation/README.md)")
        fields, new = header, False
    else:
        new = True
    with p.open("a", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerows(rows)
    return p


def run_measure(spec: ModelSpec, gpu: str, micro_batch: int, seq_len: int, framework: str = "pytorch-eager",
                recompute: str = "none", steps: int = 10, warmup: int = 3, quiet: bool = False) -> Measurement:
    """Train ``spec`` on the local CUDA GPU and time it. Needs torch and a CUDA GPU."""
    from .microbench import meta, require_cuda
    torch = require_cuda("measure")
    if framework not in FRAMEWORKS:
        raise SpecError("framework", f"{framework!r} is not measurable", f"use one of {', '.join(FRAMEWORKS)}")
    if recompute not in RECOMPUTE:
        raise SpecError("recompute", f"{recompute!r} is not supported", f"use one of {', '.join(RECOMPUTE)}")
    if seq_len > spec.max_seq_len:
        raise SpecError("seq_len", f"{seq_len} exceeds the model's {spec.max_seq_len}", "give a shorter --seq-len")
    arch_of(spec)
    import torch.nn.functional as F

    from .torch_model import build_model
    dev = torch.device("cuda")
    model = build_model(spec, recompute).to(dev)  # fp32 master weights
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    fwd = torch.compile(model) if framework == "pytorch-compile" else model
    tokens = torch.randint(0, spec.vocab_size, (micro_batch, seq_len + 1), device=dev)
    x, y = tokens[:, :-1], tokens[:, 1:]

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = fwd(x)
        loss = F.cross_entropy(logits.float().view(-1, spec.vocab_size), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def report(i: int, seconds: float) -> None:
        if not quiet:
            print(f"step {i + 1}/{steps}: {seconds * 1e3:.1f} ms", flush=True)

    try:
        times = cuda_times(torch, step, warmup, steps, after_warmup=torch.cuda.reset_peak_memory_stats,
                           on_iter=report)
    except torch.cuda.OutOfMemoryError:
        raise SpecError("micro_batch", f"{spec.name} with micro-batch {micro_batch} x {seq_len} tokens does not fit "
                        "the GPU", "lower --micro-batch or --seq-len, use --recompute full, or truncate with --layers") from None
    info = meta(torch)
    return Measurement(spec, gpu, micro_batch, seq_len, framework, recompute, times,
                       int(torch.cuda.max_memory_allocated()), info["device_name"], info["torch"], info["cuda"],
                       info["driver"], info["date"])


def guess_gpu(device_name: str) -> str | None:
    """The catalog name for a device name reported by the driver (e.g. 'NVIDIA H100 80GB HBM3')."""
    n = device_name.lower()
    table = [("h200", "h200"), ("h800", "h800"), ("h100 pcie", "h100-pcie"),
             ("h100", "h100-sxm"), ("a100-sxm4-40gb", "a100-40gb"), ("a100-pcie-40gb", "a100-40gb"),
             ("a100", "a100-80gb"), ("b200", "b200")]
    for key, name in table:
        if key in n:
            return name
    return None
