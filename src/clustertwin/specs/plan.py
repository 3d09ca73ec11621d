"""Plan: how one iteration is split over the GPUs, and the checks that it divides the job.

Rank order is Megatron's: tp innermost, then cp, then dp, then pp outermost (ep is carved out of
dp x cp for the expert layers). ``dp`` may be left out and is then derived from the GPU count.

>>> p = parse_plan("tp=8,pp=8,dp=16,sp=1,zero=1,recompute=selective")
>>> (p.tp, p.pp, p.dp, p.sp, p.zero_stage, p.recompute)
(8, 8, 16, True, 1, 'selective')
"""
from __future__ import annotations

from typing import Any, Literal, Mapping

from pydantic import Field, ValidationError, field_validator, model_validator

from ..errors import PlanError
from .model import Frozen

Recompute = Literal["none", "selective", "full"]
Precision = Literal["bf16", "fp16", "fp8", "fp32"]



def ep_overlap_layout(pp: int, vpp: int) -> bool:
    """Whether Megatron-Core's combined 1F1B (the MoE all-to-all overlap, ``overlap_ep_comm``) can run on
    this pipeline: without pipelining, or interleaved (transformer_config.py, core_r0.15: "virtual_pipeline_
    model_parallel_size must be specified when pipeline_model_parallel_size > 1"). One predicate for the
    plan's check and the pricing."""
    return pp == 1 or vpp > 1

class Plan(Frozen):
    tp: int = Field(1, gt=0, le=1024, description="tensor parallel size")
    pp: int = Field(1, gt=0, le=4096, description="pipeline stages")
    vpp: int = Field(1, gt=0, le=256, description="virtual (interleaved) chunks per stage")
    dp: int | None = Field(None, gt=0, le=10_000_000, description="data parallel size; None = derived")
    cp: int = Field(1, gt=0, le=1024, description="context parallel size (ring attention over the sequence)")
    ep: int = Field(1, gt=0, le=100_000, description="expert parallel size (MoE), carved out of dp x cp")
    etp: int | None = Field(None, gt=0, le=1024, description="expert tensor parallel size; None = tp")
    sp: bool = Field(False, description="sequence parallelism with TP (Korthikanti et al. 2022)")
    zero_stage: int = Field(1, ge=0, le=3, description="0 none, 1 optimizer, 2 +grads, 3 +weights (FSDP)")
    first_stage_layers: int | None = Field(None, ge=0, le=10_000,
                                           description="layers of the first pipeline chunk when the split is uneven "
                                                       "(0: the chunk holds the embedding alone)")
    last_stage_layers: int | None = Field(None, ge=0, le=10_000,
                                          description="layers of the last pipeline chunk when the split is uneven "
                                                      "(0: the chunk holds the output layer and the loss alone)")
    micro_batch: int = Field(1, gt=0, le=1_000_000, description="sequences per micro-batch per DP rank")
    global_batch: int | None = Field(None, gt=0, le=1_000_000_000, description="sequences per iteration")
    recompute: Recompute = "none"
    pp_schedule: Literal["1f1b", "dualpipe"] | None = Field(
        None, description="pipeline schedule: 1f1b (interleaved when vpp > 1) or dualpipe (DeepSeek-V3 Sec. 3.2.1: "
                          "bidirectional, each stage on two ranks, forward-backward chunk pairs overlapping the "
                          "MoE all-to-alls; pp even, vpp 1); None = framework default (1f1b, or dualpipe where "
                          "the framework's default is and it can run)")
    moe_routing: str = Field("uniform", min_length=1, max_length=4096,
                             description="uniform | zipf:S | a histogram file (tokens per expert)")
    moe_placement: Literal["sequential", "balanced"] = Field("sequential", description="experts to EP ranks")
    moe_capacity_factor: float | None = Field(None, gt=0, le=1000, description="drop tokens beyond c x mean per rank")
    moe_pad_to_capacity: bool = Field(
        False, description="pad every expert's input to its capacity (Megatron-Core moe_pad_expert_input_to_capacity, "
                           "with moe_capacity_factor): static shapes, so the dispatcher reads no token counts back "
                           "to the host (token_dispatcher.py: drop_and_pad leaves cuda_sync_point at 'no_sync')")
    moe_dispatcher: Literal["alltoall", "deepep"] | None = Field(
        None, description="alltoall: one copy per routed expert on every link (Megatron's default); deepep: one "
                          "copy per target node over the NICs, fanned out over NVLink (DeepSeek-V3 Sec. 3.2.2, "
                          "DeepEP); None = framework default")
    attention_kernel: Literal["flash", "flash2", "unfused"] | None = Field(
        None, description="flash (fused, no s^2 tensors: FlashAttention-3 / cuDNN class on Hopper), flash2 "
                          "(FlashAttention-2, PyTorch SDPA's own flash kernel) or unfused (bmm + fused softmax); "
                          "None = framework default")
    precision: Precision = "bf16"
    fp8_recipe: Literal["delayed", "current", "mxfp8", "blockwise"] | None = Field(
        None, description="FP8 scaling recipe (Transformer Engine): delayed (DelayedScaling, TE's and Megatron-LM's "
                          "--fp8-recipe default: one fused cast-transpose-amax kernel per quantize), current "
                          "(Float8CurrentScaling: amax, scale and cast, three kernels and one more read), mxfp8 "
                          "(Blackwell 1x32 block scales) or blockwise (1x128/128x128 scales); None = delayed; "
                          "only with precision fp8")
    cuda_graph_scope: tuple[Literal["attn", "moe_router", "moe_preprocess", "layer"], ...] | None = Field(
        None, description="parts of each layer replayed as CUDA graphs (Megatron-Core cuda_graph_impl="
                          "transformer_engine, cuda_graph_scope), joined by +: attn, moe_router, moe_preprocess "
                          "(with moe_router), or layer (the whole layer); their kernels cost the host no launch "
                          "time of their own; None or none = no CUDA graphs (Megatron-Core's default)")
    recompute_modules: tuple[Literal["core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                                     "shared_experts"], ...] | None = Field(
        None, description="with recompute=selective, the submodules recomputed in backward (Megatron-Core "
                          "recompute_modules, transformer_config.py core_r0.15), joined by +: core_attn (the attention "
                          "core), moe_act (the routed experts' activation), layernorm (both norms), mla_up_proj (the MLA "
                          "up-projections and RoPE), mlp (dense MLPs), moe (the whole MoE block), shared_experts; "
                          "None = the framework's selective recomputation (Megatron-Core's default: core_attn)")
    adam_moments_dtype: Literal["fp32", "bf16"] | None = Field(
        None, description="dtype of Adam's first and second moments (Megatron-Core precision-aware optimizer: "
                          "exp_avg_dtype / exp_avg_sq_dtype; torch.optim.Adam on bf16 parameters: bf16); "
                          "None = framework default")
    master_weights: bool | None = Field(
        None, description="the optimizer keeps an fp32 master copy of the 16-bit weights (Megatron-Core's "
                          "distributed optimizer, DeepSpeed); false: the optimizer steps the stored weights themselves "
                          "(torch.optim.Adam on bf16 parameters); None = framework default")
    defer_embedding_wgrad: int | None = Field(
        None, ge=0, le=1_000_000,
        description="Megatron-Core defer_embedding_wgrad_compute with this wgrad_deferral_limit (0 = no limit): the "
                    "output layer's weight gradient is computed after the pipeline's last backward, its input and "
                    "logit gradient kept on the last stage for up to this many micro-batches "
                    "(tensor_parallel/layers.py core_r0.9.0); None = not deferred")
    master_weights_dtype: Literal["fp32", "bf16"] | None = Field(
        None, description="dtype of the optimizer's master copy when it keeps one: fp32 (Megatron-Core's "
                          "distributed optimizer, DeepSpeed) or bf16 (apex DistributedFusedAdam with store_params and "
                          "dtype=bf16: NeMo 1.x's distributed_fused_adam with optim.dtype bf16 and fp8_params); "
                          "None = fp32")
    fp8_params: bool | None = Field(
        None, description="the model's GEMM weights are stored in FP8 only (Megatron-Core fp8_param_gather / TE "
                          "fp8_model_init: no 16-bit copy besides the optimizer's fp32 master); only with precision "
                          "fp8; None = off")
    grad_reduce_dtype: Literal["fp32", "bf16"] | None = Field(
        None, description="dtype of the gradient buffers and their DP reduction (Megatron-LM: fp32 with bf16 "
                          "training; NeMo's performance recipes: bf16); None = framework default")
    # overlap options: None = the framework's default (see specs/framework.py)
    overlap_dp_comm: bool | None = Field(None, description="gradient reduce-scatter/all-reduce overlapped with backward")
    overlap_param_gather: bool | None = Field(None, description="ZeRO/FSDP parameter all-gather overlapped with compute")
    overlap_tp_comm: bool | None = Field(None, description="TP collectives overlapped with GEMMs (userbuffers)")
    overlap_pp_comm: bool | None = Field(None, description="pipeline send/recv overlapped with compute")
    overlap_ep_comm: bool | None = Field(
        None, description="MoE dispatch/combine all-to-alls hidden under another micro-batch's compute (Megatron-Core "
                          "--overlap-moe-expert-parallel-comm: combined 1F1B, interleaved when pp > 1; not with "
                          "DualPipe, which overlaps them itself, nor with full recomputation); None = framework default")

    @field_validator("zero_stage", mode="before")
    @classmethod
    def _fsdp(cls, v):
        if isinstance(v, str) and v.strip().lower() in ("fsdp", "zero3", "zero-3"):
            return 3
        return v

    @field_validator("sp", "overlap_dp_comm", "overlap_param_gather", "overlap_tp_comm", "overlap_pp_comm",
                     "overlap_ep_comm", "master_weights", "fp8_params", mode="before")
    @classmethod
    def _bool(cls, v):
        return _to_bool(v)

    @field_validator("cuda_graph_scope", mode="before")
    @classmethod
    def _graph_scope(cls, v):
        if isinstance(v, str):
            names = [x.strip().lower() for x in v.split("+") if x.strip()]
            if names in ([], ["none"]):
                return None
            return tuple(sorted(set(names)))
        return v

    @field_validator("recompute_modules", mode="before")
    @classmethod
    def _modules(cls, v):
        if isinstance(v, str):
            names = [x.strip().lower() for x in v.split("+") if x.strip()]
            return tuple(sorted(set(names))) or None
        return v

    @model_validator(mode="before")
    @classmethod
    def _modules_imply_selective(cls, data):
        # naming the submodules to recompute asks for selective recomputation (Megatron-Core's
        # --recompute-modules goes with --recompute-granularity selective): a plan that names modules and no
        # recompute mode gets selective; one that names another mode is refused below
        if isinstance(data, dict) and data.get("recompute_modules") not in (None, "", ()) and \
                data.get("recompute") is None:
            return {**data, "recompute": "selective"}
        return data

    @model_validator(mode="after")
    def _recompute_modules(self):
        if self.recompute_modules and self.recompute != "selective":
            raise PlanError("plan.recompute_modules", f"submodules are recomputed only with recompute=selective "
                            f"(recompute={self.recompute})", "set recompute=selective, or leave recompute_modules out")
        if self.master_weights_dtype is not None and self.master_weights is False:
            raise PlanError("plan.master_weights_dtype", "a master-copy dtype without a master copy (master_weights=0)",
                            "set master_weights=1, or leave master_weights_dtype out")
        if self.fp8_params and self.precision != "fp8":
            raise PlanError("plan.fp8_params", f"FP8 weights need FP8 training (precision={self.precision})",
                            "set precision=fp8, or fp8_params=0")
        return self

    @model_validator(mode="after")
    def _cuda_graphs(self):
        # Megatron-Core's checks (transformer_config.py __post_init__, core_r0.15 0d8e071)
        scope = self.cuda_graph_scope or ()
        if "moe_preprocess" in scope and "moe_router" not in scope:
            raise PlanError("plan.cuda_graph_scope", "Megatron-Core captures moe_preprocess only with moe_router "
                            "('moe_preprocess cuda graph is only supported with moe_router cuda graph')",
                            "write cuda_graph_scope=moe_router+moe_preprocess")
        if "layer" in scope and len(scope) > 1:
            raise PlanError("plan.cuda_graph_scope", "layer already captures the whole layer",
                            "write cuda_graph_scope=layer alone")
        if scope and self.recompute == "full":
            raise PlanError("plan.cuda_graph_scope", "Megatron-Core refuses CUDA graphs with full recomputation "
                            "('Full-layer CUDA graphs not supported with activation recomputation')",
                            "use recompute=selective or none, or leave cuda_graph_scope out")
        if "layer" in scope and self.recompute == "selective":
            raise PlanError("plan.cuda_graph_scope", "Megatron-Core refuses whole-layer CUDA graphs with "
                            "recomputation", "use recompute=none, or capture parts (attn, moe_router)")
        if "moe_preprocess" in scope and self.moe_capacity_factor is not None and self.moe_dispatcher != "deepep":
            raise PlanError("plan.cuda_graph_scope", "Megatron-Core refuses moe_preprocess graphs where the "
                            "alltoall dispatcher reads token counts back in its preprocess (a capacity factor)",
                            "drop moe_preprocess, or the capacity factor")
        return self

    @model_validator(mode="after")
    def _dualpipe(self):
        if self.pp_schedule == "dualpipe" and self.pp > 1:    # (pp 1: no pipeline to schedule)
            if self.vpp > 1 or self.pp % 2:
                raise PlanError("plan.pp_schedule", f"DualPipe puts stages i and pp-1-i on one rank and is not "
                                f"interleaved (pp={self.pp}, vpp={self.vpp})",
                                "choose an even pp with vpp=1, or schedule=1f1b")
        return self

    @model_validator(mode="after")
    def _pad_to_capacity(self):
        # Megatron-Core: "moe_expert_capacity_factor must be set to use moe_pad_expert_input_to_capacity"
        # (transformer_config.py __post_init__; Megatron-Bridge moe_token_drop.py apply_moe_token_drop)
        if self.moe_pad_to_capacity and self.moe_capacity_factor is None:
            raise PlanError("plan.moe_pad_to_capacity", "padding to capacity needs a capacity factor",
                            "set moe_capacity_factor (e.g. 1.0), or moe_pad_to_capacity=false")
        return self

    @model_validator(mode="after")
    def _ep_overlap(self):
        # Megatron-Core's checks (transformer_config.py __post_init__, core_r0.15): "If enabling EP A2A overlap,
        # virtual_pipeline_model_parallel_size must be specified when pipeline_model_parallel_size > 1" (the
        # combined 1F1B exists in the interleaved and the no-pipelining schedules only) and "disable full
        # recomputation when enabling overlap_moe_expert_parallel_comm"
        if self.overlap_ep_comm:
            if not ep_overlap_layout(self.pp, self.vpp):
                raise PlanError("plan.overlap_ep_comm", f"Megatron-Core overlaps the MoE all-to-all only in the "
                                f"interleaved schedule when pp > 1 (pp={self.pp}, vpp=1)",
                                "set vpp > 1, or overlap_ep_comm=0")
            if self.pp_schedule == "dualpipe":
                raise PlanError("plan.overlap_ep_comm", "DualPipe already overlaps the MoE all-to-all",
                                "leave overlap_ep_comm out with schedule=dualpipe")
            if self.recompute == "full":
                raise PlanError("plan.overlap_ep_comm", "Megatron-Core refuses the all-to-all overlap with full "
                                "recomputation", "use recompute=selective or none, or overlap_ep_comm=0")
        return self

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp

    def resolved(self, num_gpus: int) -> "Plan":
        """With dp derived from ``num_gpus`` when it was left out."""
        if self.dp is not None:
            return self
        if num_gpus % self.model_parallel:
            raise PlanError("plan", f"tp*pp*cp = {self.model_parallel} does not divide {num_gpus} GPUs",
                            "choose tp, pp and cp whose product divides the GPU count")
        return self.model_copy(update={"dp": num_gpus // self.model_parallel})

    @property
    def gpus(self) -> int | None:
        """GPUs the plan spans; None while dp is left to be derived."""
        return None if self.dp is None else self.tp * self.pp * self.cp * self.dp

    def short(self) -> str:
        parts = [f"tp={self.tp}", f"pp={self.pp}"]
        if self.vpp > 1:
            parts.append(f"vpp={self.vpp}")
        if self.pp_schedule == "dualpipe" and self.pp > 1:
            parts.append("schedule=dualpipe")
        parts.append(f"dp={self.dp}")
        if self.cp > 1:
            parts.append(f"cp={self.cp}")
        if self.ep > 1:
            parts.append(f"ep={self.ep}")
            if self.etp is not None and self.etp != self.tp:
                parts.append(f"etp={self.etp}")
            if self.moe_dispatcher == "deepep":
                parts.append("dispatcher=deepep")
        if self.sp:
            parts.append("sp")
        parts += [f"zero={self.zero_stage}", f"mb={self.micro_batch}", f"rc={self.recompute}"]
        # the recipe settings a plan names (None: the stack's default), in --plan syntax so the text reads back
        if self.recompute_modules:
            parts.append("recompute_modules=" + "+".join(self.recompute_modules))
        if self.cuda_graph_scope:
            parts.append("cuda_graph_scope=" + "+".join(self.cuda_graph_scope))
        for key in ("adam_moments_dtype", "master_weights_dtype", "defer_embedding_wgrad"):
            if getattr(self, key) is not None:
                parts.append(f"{key}={getattr(self, key)}")
        for key in ("master_weights", "fp8_params"):
            if getattr(self, key) is not None:
                parts.append(f"{key}={int(getattr(self, key))}")
        return ",".join(parts)


class ResolvedPlan(Plan):
    """A plan checked against its job (``check_plan``, ``make_job``): dp and the global batch are
    known, so every size derived from them is an int."""

    dp: int = Field(gt=0, le=10_000_000, description="data parallel size")
    global_batch: int = Field(gt=0, le=1_000_000_000, description="sequences per iteration")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per iteration on each data-parallel rank."""
        return self.global_batch // (self.dp * self.micro_batch)

    @classmethod
    def of(cls, plan: Plan, dp: int, global_batch: int) -> "ResolvedPlan":
        """``plan`` with its dp and global batch (already checked: no validation is repeated)."""
        if isinstance(plan, cls) and plan.dp == dp and plan.global_batch == global_batch:
            return plan
        values = dict(plan)
        fields_set = set(plan.model_fields_set)
        for k, v in (("dp", dp), ("global_batch", global_batch)):
            if values[k] != v:
                values[k] = v
                fields_set.add(k)
        return cls.model_construct(_fields_set=fields_set, **values)


_TRUE = {"1", "true", "yes", "on", "y", "t"}
_FALSE = {"0", "false", "no", "off", "n", "f", ""}


def _to_bool(v):
    if v is None:
        return None
    if isinstance(v, str):
        s = v.strip().lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
    return v


_ALIASES = {
    "zero": "zero_stage", "mb": "micro_batch", "mbs": "micro_batch", "micro_batch_size": "micro_batch",
    "gb": "global_batch", "gbs": "global_batch", "global_batch_size": "global_batch",
    "vp": "vpp", "interleave": "vpp", "rc": "recompute", "first": "first_stage_layers",
    "last": "last_stage_layers", "dispatcher": "moe_dispatcher", "schedule": "pp_schedule",
    "cuda_graphs": "cuda_graph_scope", "graphs": "cuda_graph_scope",
}


def parse_plan(text: str, field: str = "plan", **overrides) -> Plan:
    """Parse "tp=8,pp=8,vpp=1,dp=16,cp=1,ep=1,sp=1,zero=1,recompute=selective" into a Plan
    (``field``: the option the text came from, for the errors in its syntax)."""
    fields = plan_fields(text, field)
    fields.update({k: v for k, v in overrides.items() if v is not None})
    return make_plan(**fields)


def plan_fields(text: str, field: str = "plan") -> dict:
    """The fields a plan text names (canonical Plan field names, values as written), before they are
    checked together: what ``parse_plan`` builds its Plan from."""
    if text is not None and not isinstance(text, str):
        raise PlanError(field, f"expected text like \"tp=8,pp=4\", got {type(text).__name__}",
                        'write key=value pairs, e.g. "tp=8,pp=4,dp=16"')
    fields: dict = {}
    for raw in (text or "").replace(";", ",").split(","):
        item = raw.strip()
        if not item:
            continue
        if "=" not in item:
            if item.lower() == "sp":
                fields["sp"] = True
                continue
            if item.lower() == "fsdp":
                fields["zero_stage"] = 3
                continue
            if item.lower() == "dualpipe":
                fields["pp_schedule"] = "dualpipe"
                continue
            raise PlanError(field, f"cannot read {item!r}", 'write key=value pairs, e.g. "tp=8,pp=4,dp=16"')
        key, value = (s.strip() for s in item.split("=", 1))
        if "=" in value or len(value.split()) > 1 or len(key.split()) > 1:
            raise PlanError(field, f"cannot read {item!r}: plan fields are separated by commas, not spaces",
                            f'write "{",".join(item.replace(" = ", "=").split())}"')
        if not key:
            raise PlanError(field, f"missing key in {item!r}", 'write key=value pairs, e.g. "tp=8,pp=4,dp=16"')
        if key.lower() == "fsdp":  # a switch: fsdp=1/true means ZeRO-3
            flag = _to_bool(value)
            if not isinstance(flag, bool):
                raise PlanError("plan.fsdp", f"expected true/false, got {value!r}", "write fsdp=1 or zero=3")
            if flag:
                fields["zero_stage"] = 3
            continue
        if key.lower() in ("ovl", "overlap"):  # search's plan text: the overlaps on, the rest off
            fields.update(_overlaps(value, field))
            continue
        key = _ALIASES.get(key.lower(), key.lower())
        if key in ("recompute", "precision", "attention_kernel", "moe_dispatcher", "grad_reduce_dtype", "pp_schedule",
                   "fp8_recipe", "cuda_graph_scope", "recompute_modules", "adam_moments_dtype",
                   "master_weights_dtype"):
            value = value.lower()
        if key not in Plan.model_fields:
            raise PlanError(f"plan.{key}", "unknown plan field",
                            f"use one of {', '.join(sorted(set(Plan.model_fields) | set(_ALIASES)))}")
        if key == "dp" and value.lower() in ("auto", ""):
            continue
        if key in fields and str(fields[key]) != value:
            raise PlanError(f"plan.{key}", f"given twice ({fields[key]} and {value})", "keep one of them")
        fields[key] = value
    return fields


_OVERLAPS = {"dp": "overlap_dp_comm", "pg": "overlap_param_gather", "tp": "overlap_tp_comm", "pp": "overlap_pp_comm"}


def _overlaps(value: str, field: str) -> dict[str, bool]:
    """``ovl=dp+pg+tp+pp`` (what search prints): the overlaps named are on, the others off; ``ovl=none``."""
    names = [v.strip().lower() for v in value.split("+") if v.strip()]
    if names == ["none"]:
        names = []
    bad = [n for n in names if n not in _OVERLAPS]
    if bad:
        raise PlanError(f"{field}.ovl", f"unknown overlap {bad[0]!r}",
                        "write ovl= with dp, pg, tp, pp joined by +, e.g. ovl=dp+pg, or ovl=none")
    return {flag: short in names for short, flag in _OVERLAPS.items()}


def make_plan(**fields) -> Plan:
    """Build a Plan, turning pydantic's errors into one-line PlanErrors."""
    try:
        return Plan(**fields)
    except ValidationError as e:
        raise PlanError(*first_error(e, "plan")) from None


def _safe_repr(value: object, limit: int = 60) -> str:
    try:
        text = repr(value)
    except Exception:  # e.g. ints beyond Python's digit limit
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def first_error(e: ValidationError, prefix: str) -> tuple[str, str, str]:
    """(field, problem, fix) of the first error pydantic found."""
    return describe_error(e.errors()[0], prefix)


def all_errors(e: ValidationError, prefix: str) -> list[tuple[str, str, str, str]]:
    """(field, problem, fix, pydantic's error type) of every error pydantic found, in its order."""
    return [(*describe_error(err, prefix), err["type"]) for err in e.errors()]


def describe_error(err: Any, prefix: str) -> tuple[str, str, str]:
    """(field, problem, fix) of one of pydantic's errors (an item of ``ValidationError.errors()``)."""
    loc = ".".join(str(x) for x in err["loc"])
    field = f"{prefix}.{loc}" if loc else prefix
    ctx_err = (err.get("ctx") or {}).get("error")
    if ctx_err is not None and hasattr(ctx_err, "one_line"):
        return ctx_err.field, ctx_err.problem, ctx_err.fix
    msg = err["msg"]
    if msg[:1].isupper() and not msg[1:2].isupper():
        msg = msg[0].lower() + msg[1:]
    fix = {
        "missing": "add it",
        "extra_forbidden": "remove it (check its spelling)",
    }.get(err["type"], "give a valid value")
    value = err.get("input")
    if err["type"] != "missing" and not isinstance(value, dict):
        msg = f"{msg} (got {_safe_repr(value)})"
    return field, msg, fix


# plan fields a search may hold fixed (the rest of a plan is set by the job: precision, global batch)
FIXABLE = ("tp", "pp", "vpp", "dp", "cp", "ep", "etp", "sp", "zero_stage", "micro_batch", "recompute",
           "attention_kernel", "overlap_dp_comm", "overlap_param_gather", "overlap_tp_comm", "overlap_pp_comm",
           "moe_dispatcher", "grad_reduce_dtype", "pp_schedule", "overlap_ep_comm", "cuda_graph_scope",
           "recompute_modules", "adam_moments_dtype", "master_weights", "master_weights_dtype", "fp8_params",
           "defer_embedding_wgrad")


def parse_fixed(fix: str | Mapping[str, Any] | None, precision: str | None = None) -> dict[str, Any]:
    """Plan fields held fixed: "tp=8,pp=4,sp=1" (the --plan syntax) or a mapping of Plan fields, checked
    together with the job's ``precision`` where they do not name one (so fp8_params=1 holds under
    --precision fp8)."""
    if fix is None or fix == "":
        return {}
    named = plan_fields(fix, "fix") if isinstance(fix, str) else dict(fix)
    job = {"precision": precision} if precision is not None and "precision" not in named else {}
    plan: Plan = parse_plan(fix, "fix", **job) if isinstance(fix, str) else make_plan(**{**job, **named})
    fields = {k: getattr(plan, k) for k in plan.model_fields_set if k not in job}
    if "global_batch" in fields:
        raise PlanError("fix.global_batch", "the global batch is part of the job, not of the plan searched",
                        "give it with --global-batch")
    extra = set(fields) - set(FIXABLE) - {"precision", "fp8_recipe"}
    if extra:
        raise PlanError(f"fix.{sorted(extra)[0]}", "cannot be held fixed", f"fix one of {', '.join(FIXABLE)}")
    return fields
