"""Read measured runs in the validation schema (see docs/validation.md) and turn each row into a
TrainingJob. Empty cells are unknown: the assumption made for each is recorded with the row."""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..catalog import cluster_for_gpu, load_cluster
from ..errors import ClusterTwinError, DataError
from ..parallel.rules import JobFacts, PlanFacts, rule
from ..specs import ModelSpec, TrainingJob, make_job, make_plan
from ..specs.framework import get_framework

REQUIRED = ("run_id", "arch", "layers", "hidden", "heads", "ffn_hidden", "vocab", "seq_len", "gpu", "num_gpus",
            "metric", "value")
METRICS = ("iteration_time_s", "tflops_per_gpu", "mfu", "tokens_per_s_per_gpu", "peak_memory_bytes")

_ARCH = {
    # Megatron-LM's GPT defaults: hidden and attention dropout 0.1
    "gpt": dict(activation="gelu", norm="layernorm", positions="learned", bias=True, dropout=0.1),
    "llama": dict(activation="swiglu", norm="rmsnorm", positions="rope", bias=False),
    "mixtral": dict(activation="swiglu", norm="rmsnorm", positions="rope", bias=False),
    "deepseek": dict(activation="swiglu", norm="rmsnorm", positions="rope", bias=False),
}


@dataclass
class MeasuredRow:
    run_id: str
    metric: str
    value: float
    raw: dict
    line: int
    assumptions: list[str] = field(default_factory=list)


def read_runs(path: str | Path) -> list[MeasuredRow]:
    p = Path(path)
    if not p.exists():
        raise DataError("file", f"{str(p)!r} not found", "give a CSV in the validation schema")
    with p.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None:
            raise DataError("file", f"{p.name} is empty", "give a CSV with a header row")
        missing = [c for c in REQUIRED if c not in reader.fieldnames]
        if missing:
            raise DataError("file", f"{p.name} lacks the column(s) {', '.join(missing)}",
                            "use the validation schema (docs/validation.md)")
        rows = []
        for i, r in enumerate(reader, start=2):
            try:
                value = float(r["value"])
            except (TypeError, ValueError):
                value = float("nan")
            rows.append(MeasuredRow(r["run_id"], (r["metric"] or "").strip(), value, r, i))
    return rows


def _int(r: dict, key: str, default: int | None = None) -> int | None:
    v = (r.get(key) or "").strip()
    if v == "":
        return default
    try:
        return int(float(v))
    except ValueError:
        raise DataError(key, f"{v!r} is not a number", "fix the cell or leave it empty") from None


def _bool(r: dict, key: str) -> bool | None:
    v = (r.get(key) or "").strip().lower()
    if v == "":
        return None
    return v in ("1", "true", "yes")


def publication_year(r: dict) -> int | None:
    """Year a run was published: from an arXiv id (YYMM.NNNNN) in source_url, else a 20XX in source."""
    url = r.get("source_url") or ""
    m = re.search(r"arxiv\.org/(?:abs|pdf)/(\d{2})(\d{2})\.\d{4,5}", url)
    if m:
        return 2000 + int(m.group(1))
    m = re.search(r"\b(20\d{2})\b", r.get("source") or "")
    if m:
        return int(m.group(1))
    m = re.search(r"\bSC(\d{2})\b", r.get("source") or "")
    return 2000 + int(m.group(1)) if m else None


# Megatron-LM gained FlashAttention (through Transformer Engine) and TP communication overlap in
# 2023; runs published before then used its fused scale-mask-softmax attention and blocking TP
# collectives (Narayanan et al. 2021; Korthikanti et al. 2022 Sec. 4).
_STACK_YEAR = 2023


def model_from_row(r: dict) -> ModelSpec:
    """The model of a row: the catalog preset named in the optional ``model_preset`` column (for
    layouts the CSV columns cannot describe: MLA, shared experts, dense first layers, head sizes),
    checked against the row's dimensions; otherwise built from the columns and the arch."""
    preset = (r.get("model_preset") or "").strip()
    if preset:
        from ..catalog import load_model
        m = load_model(preset)
        for col, value in (("layers", m.num_layers), ("hidden", m.hidden_size), ("heads", m.num_heads)):
            if _int(r, col) is not None and _int(r, col) != value:
                raise DataError(col, f"{_int(r, col)} disagrees with preset {preset} ({value})",
                                "fix the row or the model_preset column")
        vocab = _int(r, "vocab")
        if vocab and vocab != m.vocab_size:  # the run's tokenizer, not the published one
            m = m.model_copy(update={"vocab_size": vocab})
        return m
    arch = (r.get("arch") or "").strip().lower()
    if arch not in _ARCH:
        raise DataError("arch", f"unknown arch {arch!r}", f"use one of {', '.join(_ARCH)}")
    experts = _int(r, "moe_experts", 0) or 0
    return ModelSpec(
        name=r.get("model") or r["run_id"], num_layers=_int(r, "layers"), hidden_size=_int(r, "hidden"),
        num_heads=_int(r, "heads"), num_kv_heads=_int(r, "kv_heads"), ffn_hidden_size=_int(r, "ffn_hidden"),
        vocab_size=_int(r, "vocab"), max_seq_len=_int(r, "seq_len"), moe_num_experts=experts,
        moe_top_k=_int(r, "moe_topk", 0) or 0 if experts else 0, **_ARCH[arch])


def job_from_row(row: MeasuredRow) -> TrainingJob:
    """The TrainingJob a row describes; the assumptions made for empty cells go to row.assumptions."""
    r, notes = row.raw, row.assumptions
    model = model_from_row(r)
    num_gpus = _int(r, "num_gpus")
    gpn = _int(r, "gpus_per_node")
    if (r.get("cluster") or "").strip():
        cluster = load_cluster(r["cluster"].strip()).with_gpus(num_gpus)
    else:
        cluster = cluster_for_gpu(r["gpu"].strip(), num_gpus, gpn)
    gbps = (r.get("inter_node_gbps_per_node") or "").strip()
    if gbps:
        node = cluster.node
        per_nic = float(gbps) * 1e9 / 8 / node.nics_per_node
        cluster = cluster.model_copy(update={"node": node.model_copy(update={"nic_bandwidth_bytes_per_s": per_nic})})
    framework = (r.get("framework") or "megatron").strip() or "megatron"
    if framework == "other":
        framework = "megatron"
        notes.append("framework 'other' priced as megatron")
    tp = _int(r, "tp", 1)
    sp = _bool(r, "sp")
    if sp is None:
        sp = tp > 1 and framework in ("megatron", "nemo")
        notes.append(f"sp unknown: assumed {int(sp)} ({framework} default with tp>1)")
    zero = _int(r, "zero_stage")
    if zero is None:
        zero = 1 if framework in ("megatron", "nemo") else (3 if framework == "torchtitan" else 0)
        notes.append(f"zero_stage unknown: assumed {zero} ({framework} default)")
    mb = _int(r, "micro_batch")
    if mb is None:
        mb = 1
        notes.append("micro_batch unknown: assumed 1")
    rc = (r.get("recompute") or "").strip() or "none"
    if not (r.get("recompute") or "").strip():
        notes.append("recompute unknown: assumed none")
    prec = (r.get("precision") or "").strip() or "bf16"
    fields = dict(tp=tp, pp=_int(r, "pp", 1), vpp=_int(r, "vpp", 1) or 1, dp=_int(r, "dp"), cp=_int(r, "cp", 1) or 1,
                  ep=_int(r, "ep", 1) or 1, etp=_int(r, "etp"), sp=sp, zero_stage=zero, micro_batch=mb,
                  global_batch=_int(r, "global_batch"), recompute=rc, precision=prec)
    dispatcher = (r.get("moe_dispatcher") or "").strip().lower()
    if dispatcher:
        fields["moe_dispatcher"] = dispatcher
    overlap = _bool(r, "dp_overlap")
    if overlap is not None:
        fields["overlap_dp_comm"] = overlap
    kernel = (r.get("attention") or "").strip().lower()
    tp_overlap = _bool(r, "tp_overlap")
    year = publication_year(r)
    if not kernel and year is not None and year < _STACK_YEAR and framework in ("megatron", "nemo", "deepspeed"):
        kernel = "unfused"
        notes.append(f"attention kernel unknown: assumed unfused (published {year}, before FlashAttention in {framework})")
        if tp_overlap is None:
            tp_overlap = False
            notes.append(f"TP communication overlap assumed off (published {year})")
    if kernel:
        fields["attention_kernel"] = kernel
    if tp_overlap is not None:
        fields["overlap_tp_comm"] = tp_overlap
    dp = fields["dp"] or max(1, num_gpus // (tp * (fields["pp"] or 1) * fields["cp"]))   # derived when empty
    ep, dense_ranks = fields["ep"], tp * fields["cp"] * dp
    if model.is_moe and fields["etp"] is None:
        # the rule experts fold by (parallel/rules.py): if Megatron-Core's default etp = tp cannot fold
        # these experts onto tp x cp x dp but etp = 1 can, the only plan that ran is one with unsplit
        # experts (recipes such as Qwen3-235B set etp=1 explicitly)
        facts = JobFacts.of(model, cluster, _int(r, "seq_len") or model.max_seq_len, get_framework(framework))
        sizes = PlanFacts(tp, cp=fields["cp"], dp=dp, ep=ep)
        folds = rule("ep_dp_cp")
        if folds.broken(facts, sizes) and not folds.broken(facts, replace(sizes, etp=1)):
            fields["etp"] = 1
            notes.append(f"etp unknown: assumed 1 (ep*tp = {ep}*{tp} does not divide tp*cp*dp = {dense_ranks})")
    for col in ("first_stage_layers", "last_stage_layers"):
        if _int(r, col) is not None:
            fields[col] = _int(r, col)
    chunks = (fields["pp"] or 1) * fields["vpp"]
    if ("first_stage_layers" not in fields and "last_stage_layers" not in fields and chunks > 1
            and model.num_layers % chunks and (model.num_layers + 2) % chunks):
        notes.append(f"{model.num_layers} layers do not split evenly over pp*vpp = {chunks} chunks: assumed as even as "
                     "possible, the spare layers on the middle chunks")
    plan = make_plan(**fields)
    return make_job(model, cluster, plan, _int(r, "seq_len"), framework)


__all__ = ["MeasuredRow", "read_runs", "job_from_row", "model_from_row", "METRICS", "ClusterTwinError"]
