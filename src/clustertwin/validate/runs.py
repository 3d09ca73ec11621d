"""Read measured runs in the validation schema (see docs/validation.md) and turn each row into a
TrainingJob. Empty cells are unknown: the assumption made for each is recorded with the row."""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from pydantic import ValidationError

from ..catalog import cluster_for_gpu, load_cluster
from ..cost.profile import profile_assumption
from ..errors import ClusterTwinError, DataError
from ..parallel.rules import JobFacts, PlanFacts, rule
from ..specs import ModelSpec, TrainingJob, make_job, make_plan
from ..specs.framework import equivalent_release, family_versions, get_framework, resolve_stack
from ..specs.plan import first_error

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
        f = float(v)
    except ValueError:
        raise DataError(key, f"{v!r} is not a number", "fix the cell or leave it empty") from None
    if not f.is_integer():   # never truncated: 1.5 GPUs or micro-batches is a typo, not a 1
        raise DataError(key, f"{v!r} is not a whole number", "write a whole number or leave the cell empty")
    return int(f)


_TRUE, _FALSE = ("1", "true", "yes"), ("0", "false", "no")


def _bool(r: dict, key: str) -> bool | None:
    """A yes/no cell: empty is unknown (None); anything but 1/0, true/false, yes/no is refused, never read
    as false."""
    v = (r.get(key) or "").strip().lower()
    if v == "":
        return None
    if v not in _TRUE + _FALSE:
        raise DataError(key, f"{v!r} is not a yes/no value", "write 1 or 0 (true/false, yes/no), or leave it empty")
    return v in _TRUE


# Empty model cells: what a row of each arch most likely had (stated with the row when used).
# The tokenizer each arch's models usually ship: GPT-2's BPE (50257), Llama 1/2's and Mistral's
# SentencePiece (32000), DeepSeek-V3's (129280, its config.json).
_USUAL_VOCAB = {"gpt": (50257, "GPT-2 BPE"), "llama": (32000, "Llama 2 SentencePiece"),
                "mixtral": (32000, "Mixtral SentencePiece"), "deepseek": (129280, "DeepSeek-V3")}
_HEAD_DIM = 128   # GPT-3 175B (12288/96), Llama 2/3 (4096/32, 8192/64): the common head size


def _usual_ffn(arch: str, hidden: int) -> tuple[int, str]:
    if arch == "gpt":
        return 4 * hidden, "4*hidden (GPT)"
    # Llama's FeedForward (meta-llama/llama model.py): int(2 * 4h / 3) rounded up to multiple_of = 256
    ffn = int(2 * 4 * hidden / 3)
    ffn = 256 * ((ffn + 255) // 256)
    return ffn, "int(8*hidden/3) rounded up to a multiple of 256 (Llama's SwiGLU rule)"


def model_from_row(r: dict, notes: list[str] | None = None) -> ModelSpec:
    """The model of a row: the catalog preset named in the optional ``model_preset`` column (for
    layouts the CSV columns cannot describe: MLA, shared experts, dense first layers, head sizes),
    checked against the row's dimensions; otherwise built from the columns and the arch. Empty
    dimensions that have a usual value get it, stated in ``notes``."""
    notes = [] if notes is None else notes
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
        mtp = _int(r, "mtp_depth")
        if mtp is not None and mtp < 0:
            raise DataError("mtp_depth", f"{mtp} is negative", "write 0 (no MTP module) or the modules trained")
        if mtp is not None and mtp != m.mtp_depth:   # whether the run trained the preset's MTP modules
            m = m.model_copy(update={"mtp_depth": mtp})
        elif mtp is None and m.mtp_depth:
            notes.append(f"mtp_depth unknown: the preset's {m.mtp_depth} (multi-token-prediction modules trained)")
        return m
    arch = (r.get("arch") or "").strip().lower()
    if arch not in _ARCH:
        raise DataError("arch", f"unknown arch {arch!r}", f"use one of {', '.join(_ARCH)}")
    layers, hidden = _int(r, "layers"), _int(r, "hidden")
    for col, v in (("layers", layers), ("hidden", hidden)):
        if v is None:
            raise DataError(col, "empty: the model has no usual value for it", "fill the cell or name a model_preset")
    assert layers is not None and hidden is not None
    heads = _int(r, "heads")
    if heads is None:
        if hidden % _HEAD_DIM:
            raise DataError("heads", f"empty, and hidden {hidden} is not a multiple of the usual head size "
                            f"{_HEAD_DIM}", "fill the cell")
        heads = hidden // _HEAD_DIM
        notes.append(f"heads unknown: assumed hidden/{_HEAD_DIM} = {heads}")
    kv_heads = _int(r, "kv_heads")
    if kv_heads is None:
        kv_heads = heads
        notes.append(f"kv_heads unknown: assumed heads = {heads} (multi-head attention)")
    ffn = _int(r, "ffn_hidden")
    if ffn is None:
        ffn, rule = _usual_ffn(arch, hidden)
        notes.append(f"ffn_hidden unknown: assumed {rule} = {ffn}")
    vocab = _int(r, "vocab")
    if vocab is None:
        vocab, tokenizer = _USUAL_VOCAB[arch]
        notes.append(f"vocab unknown: assumed {vocab} ({tokenizer} tokenizer)")
    seq = _int(r, "seq_len")
    if seq is None:
        raise DataError("seq_len", "empty: a step's work depends on it", "fill the cell")
    experts = _int(r, "moe_experts", 0) or 0
    top_k = _int(r, "moe_topk", 0) or 0 if experts else 0
    if experts and not top_k:
        raise DataError("moe_topk", "empty for an MoE row", "fill the cell (experts per token)")
    # the output head shares the token embedding's weights (MPT's SharedEmbedding, GPT-2): one vocab x hidden
    # matrix stored, gathered and stepped, the head's GEMM still run; empty = untied (the arch's usual head)
    tied = bool(_bool(r, "tied_embeddings"))
    arch_fields = dict(_ARCH[arch])
    drop = (r.get("dropout") or "").strip()
    if drop:   # the run's dropout probability where it differs from the arch's usual one (MPT: 0.0)
        try:
            arch_fields["dropout"] = float(drop)
        except ValueError:
            raise DataError("dropout", f"cannot read {drop!r}", "write a probability, e.g. 0.0 or 0.1") from None
    try:
        return ModelSpec(name=r.get("model") or r["run_id"], num_layers=layers, hidden_size=hidden, num_heads=heads,
                         num_kv_heads=kv_heads, ffn_hidden_size=ffn, vocab_size=vocab, max_seq_len=seq,
                         moe_num_experts=experts, moe_top_k=top_k, tied_embeddings=tied, **arch_fields)
    except ValidationError as e:
        raise DataError(*first_error(e, "model")) from None


_KERNELS = {"flash": "flash", "flash3": "flash", "fa3": "flash", "cudnn": "flash", "te": "flash",
            "flash2": "flash2", "fa2": "flash2", "sdpa": "flash2",
            "unfused": "unfused", "fused-softmax": "unfused", "fused_softmax": "unfused", "softmax": "unfused"}


# llm-foundry's attn_impl (column attention_impl): which build ran its FlashAttention-2-class kernel, which picks
# the profile (llm-foundry-triton or llm-foundry-flash; specs/framework.py resolve_stack)
_IMPLS = {"flash-attn": "flash-attn", "flash_attn": "flash-attn", "flash": "flash-attn", "triton": "triton"}


def _kernel(r: dict) -> str:
    """The attention kernel a row states (``attention_kernel``, or the older ``attention``), in the
    names plans use: flash (FlashAttention-3 / cuDNN class), flash2, unfused (fused softmax)."""
    v = ((r.get("attention_kernel") or "").strip() or (r.get("attention") or "").strip()).lower()
    if not v:
        return ""
    if v not in _KERNELS:
        raise DataError("attention_kernel", f"unknown kernel {v!r}", "use flash2, flash3, cudnn or unfused")
    return _KERNELS[v]


def stack_of_row(r: dict, notes: list[str]) -> str:
    """The framework profile a row ran on, from ``framework``, ``framework_version`` and ``compile``;
    what the row does not say is stated in ``notes`` (never guessed from the publication date)."""
    framework = (r.get("framework") or "").strip()
    if not framework:
        framework = "megatron"
        notes.append("framework unknown: assumed megatron")
    elif framework.lower() == "other":
        framework = "megatron"
        notes.append("framework 'other' priced as megatron")
    version = (r.get("framework_version") or "").strip()
    compiled = _bool(r, "compile")
    impl = (r.get("attention_impl") or "").strip().lower()
    if impl and impl not in _IMPLS:
        raise DataError("attention_impl", f"unknown implementation {impl!r}",
                        "write llm-foundry's attn_impl: triton or flash (flash-attn)")
    name, how = resolve_stack(framework, version or None, compiled, _IMPLS.get(impl))
    fw = get_framework(name)
    if impl and fw.family != "llm-foundry":
        raise DataError("attention_impl", f"{impl!r} is read for llm-foundry rows only (framework {framework!r})",
                        "leave it empty; name the kernel in attention_kernel")
    if impl and (_IMPLS[impl] == "triton") != fw.attention_triton:
        raise DataError("attention_impl", f"{impl!r} disagrees with framework {name!r}",
                        "name the family (llm-foundry) and let attention_impl pick the profile")
    if how:
        notes.append(f"framework {framework} {version}: priced as {name} ({how})")
    elif fw.family == "torchtitan" and not fw.released:
        notes.append(f"compile unknown: priced as {name} (neither torchtitan-eager nor torchtitan-compile)")
    elif not fw.released and family_versions(fw.family) and "@" not in framework:
        same = equivalent_release(fw)
        notes.append(f"framework_version unknown: priced as {name}"
                     + (f" (the defaults of {same.name})" if same else ""))
    return name


def job_from_row(row: MeasuredRow) -> TrainingJob:
    """The TrainingJob a row describes; the assumptions made for empty cells go to row.assumptions."""
    r, notes = row.raw, row.assumptions
    model = model_from_row(r, notes)
    gpu = (r.get("gpu") or "").strip()
    cluster_name = (r.get("cluster") or "").strip()
    if not gpu and not cluster_name:
        raise DataError("gpu", "empty", "name the GPU (e.g. a100-80gb, h100-sxm)")
    gpn = _int(r, "gpus_per_node")
    tp, pp, dp, cp = _int(r, "tp"), _int(r, "pp"), _int(r, "dp"), _int(r, "cp", 1) or 1
    num_gpus = _int(r, "num_gpus")
    if num_gpus is None:
        if None in (tp, pp, dp):
            raise DataError("num_gpus", "empty, and tp, pp and dp do not all say it", "fill the cell")
        num_gpus = tp * pp * dp * cp  # type: ignore[operator]
        notes.append(f"num_gpus unknown: assumed tp*pp*dp*cp = {num_gpus}")
    if tp is None or pp is None:
        mp = num_gpus // (dp * cp) if dp and num_gpus % (dp * cp) == 0 else None
        if mp is None:
            notes.append(f"{'tp' if tp is None else 'pp'}{' and pp' if tp is None and pp is None else ''} unknown: "
                         "assumed 1")
            tp, pp = tp or 1, pp or 1
        elif tp is None and pp is None:
            tp = math.gcd(mp, gpn or 8)   # TP inside a node, the rest pipelined
            pp = mp // tp
            notes.append(f"tp and pp unknown: tp*pp = num_gpus/(dp*cp) = {mp}, assumed tp {tp} (within a node), pp {pp}")
        elif tp is None:
            if mp % pp:
                raise DataError("tp", f"empty, and num_gpus/(dp*cp) = {mp} is not a multiple of pp {pp}",
                                "fill the cell")
            tp = mp // pp
            notes.append(f"tp unknown: assumed num_gpus/(dp*cp*pp) = {tp}")
        else:
            if mp % tp:
                raise DataError("pp", f"empty, and num_gpus/(dp*cp) = {mp} is not a multiple of tp {tp}",
                                "fill the cell")
            pp = mp // tp
            notes.append(f"pp unknown: assumed num_gpus/(dp*cp*tp) = {pp}")
    assert tp is not None and pp is not None
    if cluster_name:
        cluster = load_cluster(cluster_name).with_gpus(num_gpus)
    else:
        cluster = cluster_for_gpu(gpu, num_gpus, gpn)
    gbps = (r.get("inter_node_gbps_per_node") or "").strip()
    if gbps:
        node = cluster.node
        per_nic = float(gbps) * 1e9 / 8 / node.nics_per_node
        cluster = cluster.model_copy(update={"node": node.model_copy(update={"nic_bandwidth_bytes_per_s": per_nic})})
    framework = stack_of_row(r, notes)
    fw = get_framework(framework)
    sp = _bool(r, "sp")
    if sp is None:
        sp = tp > 1 and fw.sp_with_tp
        notes.append(f"sp unknown: assumed {int(sp)} ({framework} default{' with tp>1' if tp > 1 else ''})")
    zero = _int(r, "zero_stage")
    if zero is None:
        zero = fw.default_zero_stage
        notes.append(f"zero_stage unknown: assumed {zero} ({framework} default)")
    mb = _int(r, "micro_batch")
    if mb is None:
        mb = 1
        notes.append("micro_batch unknown: assumed 1")
    rc = (r.get("recompute") or "").strip() or "none"
    if not (r.get("recompute") or "").strip():
        notes.append("recompute unknown: assumed none")
    prec = (r.get("precision") or "").strip()
    if not prec:
        prec = "bf16"
        notes.append("precision unknown: assumed bf16")
    fields = dict(tp=tp, pp=pp, vpp=_int(r, "vpp", 1) or 1, dp=dp, cp=cp,
                  ep=_int(r, "ep", 1) or 1, etp=_int(r, "etp"), sp=sp, zero_stage=zero, micro_batch=mb,
                  global_batch=_int(r, "global_batch"), recompute=rc, precision=prec)
    # text columns named as the plan fields they set (the plan checks their values)
    named = {col: (r.get(col) or "").strip().lower()
             for col in ("moe_dispatcher", "pp_schedule", "fp8_recipe", "cuda_graph_scope", "recompute_modules")}
    fields.update({col: v for col, v in named.items() if v})
    if not named["pp_schedule"] and pp > 1 and fw.pp_schedule != "1f1b":
        notes.append(f"pipeline schedule unknown: {fw.pp_schedule} ({framework} default)")
    capacity = (r.get("moe_capacity_factor") or "").strip()
    if capacity:
        try:
            fields["moe_capacity_factor"] = float(capacity)
        except ValueError:
            raise DataError("moe_capacity_factor", f"cannot read {capacity!r}", "write a number, e.g. 1.0") from None
    if not named["fp8_recipe"] and prec == "fp8":
        notes.append("fp8_recipe unknown: delayed scaling (Transformer Engine's and Megatron-LM's default)")
    for col, key in (("grad_reduce_dtype", "grad_reduce_dtype"), ("exp_avg_dtype", "adam_moments_dtype"),
                     ("master_weights_dtype", "master_weights_dtype")):
        v = (r.get(col) or "").strip().lower()
        if v:
            if v not in ("fp32", "bf16"):
                raise DataError(col, f"{v!r} is not a dtype", "write fp32 or bf16, or leave it empty")
            fields[key] = v
    for col, key in (("master_weights", "master_weights"), ("fp8_param_gather", "fp8_params")):
        flag = _bool(r, col)
        if flag is not None:
            fields[key] = flag
    pad = _bool(r, "moe_pad_to_capacity")
    if pad is not None:
        fields["moe_pad_to_capacity"] = pad
    ep_overlap = _bool(r, "ep_overlap")
    if ep_overlap is not None:
        fields["overlap_ep_comm"] = ep_overlap
    elif model.is_moe and (_int(r, "ep", 1) or 1) > 1:
        notes.append(f"EP all-to-all overlap unknown: {'on' if fw.overlap_ep_comm else 'off'} ({framework} default)")
    overlap = _bool(r, "dp_overlap")
    if overlap is not None:
        fields["overlap_dp_comm"] = overlap
    kernel = _kernel(r)
    if kernel:
        fields["attention_kernel"] = kernel
    else:
        notes.append(f"attention kernel unknown: {fw.attention_kernel} ({framework} default)")
    tp_overlap = _bool(r, "tp_overlap")
    if tp_overlap is not None:
        fields["overlap_tp_comm"] = tp_overlap
    elif tp > 1:
        notes.append(f"TP communication overlap unknown: {'on' if fw.overlap_tp_comm else 'off'} ({framework} default)")
    dp = fields["dp"] or max(1, num_gpus // (tp * pp * cp))   # derived when empty
    if fields["dp"] is None:
        notes.append(f"dp unknown: assumed num_gpus/(tp*pp*cp) = {dp}")
    if fields["global_batch"] is None:
        notes.append("global_batch unknown: assumed enough micro-batches to fill the pipeline twice")
    ep, dense_ranks = fields["ep"], tp * cp * dp
    if model.is_moe and fields["etp"] is None:
        # the rule experts fold by (parallel/rules.py): if Megatron-Core's default etp = tp cannot fold
        # these experts onto tp x cp x dp but etp = 1 can, the only plan that ran is one with unsplit
        # experts (recipes such as Qwen3-235B set etp=1 explicitly)
        facts = JobFacts.of(model, cluster, _int(r, "seq_len") or model.max_seq_len, fw)
        sizes = PlanFacts(tp, cp=cp, dp=dp, ep=ep)
        folds = rule("ep_dp_cp")
        if folds.broken(facts, sizes) and not folds.broken(facts, replace(sizes, etp=1)):
            fields["etp"] = 1
            notes.append(f"etp unknown: assumed 1 (ep*tp = {ep}*{tp} does not divide tp*cp*dp = {dense_ranks})")
    if _int(r, "defer_embedding_wgrad") is not None:
        fields["defer_embedding_wgrad"] = _int(r, "defer_embedding_wgrad")
    for col in ("first_stage_layers", "last_stage_layers"):
        if _int(r, col) is not None:
            fields[col] = _int(r, col)
    chunks = pp * fields["vpp"]
    if ("first_stage_layers" not in fields and "last_stage_layers" not in fields and chunks > 1
            and model.num_layers % chunks and (model.num_layers + 2) % chunks):
        notes.append(f"{model.num_layers} layers do not split evenly over pp*vpp = {chunks} chunks: assumed as even as "
                     "possible, the spare layers on the middle chunks")
    plan = make_plan(**fields)
    hardware = profile_assumption(cluster.gpu)   # Blackwell: which profile figures are assumed (issue 16)
    if hardware:
        notes.append(hardware)
    return make_job(model, cluster, plan, _int(r, "seq_len") or model.max_seq_len, framework)


__all__ = ["MeasuredRow", "read_runs", "job_from_row", "model_from_row", "stack_of_row", "METRICS", "ClusterTwinError"]
