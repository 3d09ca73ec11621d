"""TrainingJob: a model on a cluster under a plan, and the checks that the plan divides the job
(the rules themselves are one table, ``parallel/rules.py``)."""
from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, ValidationError, field_validator

from ..errors import PlanError
from ..parallel.layout import stage_layer_split
from ..parallel.rules import JobFacts, PlanFacts, check_rules
from .framework import FrameworkProfile, get_framework
from .hardware import ClusterSpec
from .model import Frozen, ModelSpec
from .plan import Plan, ResolvedPlan, first_error

Framework = Literal["megatron", "nemo", "torchtitan", "deepspeed", "pytorch-eager", "pytorch-compile"]
# the unversioned stacks; every profile of specs/framework.py (versioned: megatron-lm@2021, nemo@24.07,
# torchtitan-compile, ...) is a valid TrainingJob.framework
FRAMEWORKS: tuple[str, ...] = ("megatron", "nemo", "torchtitan", "deepspeed", "pytorch-eager", "pytorch-compile")


# The global batch of a job that names none: a fixed number of tokens per step, so that plans compared
# side by side train the same batch (it used to be dp x micro-batch x 2pp: a function of the plan).
# 2,097,152 = 2^21 tokens: the default job's 256 sequences of 8,192 (the README's main example), and in
# the range published pretraining runs use (GPT-3: 0.5M-3.2M tokens, Brown et al. 2020 Table 2.1).
DEFAULT_TOKENS_PER_STEP = 2**21


def default_global_batch(seq_len: int, unit: int = 1) -> int:
    """Sequences per step of a job that gives no global batch: DEFAULT_TOKENS_PER_STEP tokens in
    sequences of ``seq_len``, rounded to the nearest multiple of ``unit`` (what the plan divides:
    dp x micro-batch, times pp under interleaving), and at least one ``unit``.

    >>> default_global_batch(8192, 32), default_global_batch(2048), default_global_batch(8192, 4608)
    (256, 1024, 4608)
    """
    return max(1, math.floor(DEFAULT_TOKENS_PER_STEP / seq_len / unit + 0.5)) * unit


class TrainingJob(Frozen):
    model: ModelSpec
    cluster: ClusterSpec
    plan: ResolvedPlan
    seq_len: int = Field(gt=0, le=100_000_000)
    framework: str = "megatron"
    tokens: float | None = Field(None, gt=0, description="tokens to train (for time-to-train)")
    global_batch_source: Literal["given", "default"] = Field(
        "given", description="default: the plan gave none, so DEFAULT_TOKENS_PER_STEP tokens (default_global_batch)")

    @field_validator("framework")
    @classmethod
    def _known_framework(cls, v: str) -> str:
        return get_framework(v).name

    @property
    def tokens_per_step(self) -> int:
        return self.plan.global_batch * self.seq_len


def check_plan(model: ModelSpec, cluster: ClusterSpec, plan: Plan, seq_len: int,
               framework: str | FrameworkProfile = "megatron") -> ResolvedPlan:
    """Resolve dp (and a missing global batch) and check the plan against the rules of
    ``parallel/rules.py`` in their order, the framework's capabilities last; returns the resolved plan."""
    if seq_len <= 0:
        raise PlanError("seq_len", f"{seq_len} must be positive", "give the training sequence length")
    fw = get_framework(framework) if isinstance(framework, str) else framework
    n = cluster.num_gpus
    plan = plan.resolved(n)
    dp = plan.dp
    assert dp is not None  # resolved() derives it
    gb = plan.global_batch
    if gb is None:   # a fixed number of tokens, whatever the plan (rounded to what the plan divides)
        gb = default_global_batch(seq_len, dp * plan.micro_batch * (plan.pp if plan.vpp > 1 else 1))
    resolved = ResolvedPlan.of(plan, dp, gb)
    # Megatron-LM: --fp8-recipe only takes effect with --fp8-format (arguments.py); refuse, not ignore
    if resolved.fp8_recipe is not None and resolved.precision != "fp8":
        raise PlanError("plan.fp8_recipe", f"an FP8 recipe with precision {resolved.precision}",
                        "set precision fp8, or drop fp8_recipe")
    _check_cuda_graphs(model, resolved, fw)
    _check_recipe_fields(resolved, fw)
    check_rules(JobFacts.of(model, cluster, seq_len, fw), PlanFacts.of(resolved))
    return resolved


def _check_cuda_graphs(model: ModelSpec, plan: Plan, fw: FrameworkProfile) -> None:
    """CUDA graph scopes are Megatron-Core's (transformer_config.py cuda_graph_scope, core_r0.15 0d8e071)."""
    scope = plan.cuda_graph_scope or ()
    if not scope:
        return
    if fw.family not in ("megatron", "nemo"):
        raise PlanError("plan.cuda_graph_scope", f"CUDA graph scopes are Megatron-Core's (cuda_graph_impl="
                        f"transformer_engine); {fw.name} has none priced", "leave cuda_graph_scope out")
    moe_scopes = [s for s in scope if s.startswith("moe_")]
    if moe_scopes and not model.is_moe:
        raise PlanError("plan.cuda_graph_scope", f"{moe_scopes[0]} needs an MoE model ('moe cuda graph is only "
                        "supported for MoE')", "capture attn or layer, or leave cuda_graph_scope out")
    if "layer" in scope and model.is_moe and not plan.moe_pad_to_capacity:
        # a dropless MoE layer reads its token counts back to the host (token_dispatcher.py cuda_sync_point),
        # which a graph cannot capture ('moe cuda graph is only supported with drop-padding MoE')
        raise PlanError("plan.cuda_graph_scope", "a whole-layer graph of a dropless MoE layer (its token counts "
                        "are read back to the host)", "capture attn+moe_router+moe_preprocess, or pad to capacity")


def _check_recipe_fields(plan: Plan, fw: FrameworkProfile) -> None:
    """The recipe settings a plan names exist on the stack it runs on: refused, never ignored."""
    megatron_core = fw.family in ("megatron", "nemo")
    if plan.recompute_modules and not megatron_core:
        raise PlanError("plan.recompute_modules", f"recompute_modules is Megatron-Core's list; {fw.name} recomputes "
                        f"its own set with recompute=selective", "leave recompute_modules out, or --framework megatron")
    if plan.defer_embedding_wgrad is not None:
        if not megatron_core:
            raise PlanError("plan.defer_embedding_wgrad", f"a Megatron-Core option (defer_embedding_wgrad_compute); "
                            f"{fw.name} has none", "leave defer_embedding_wgrad out, or --framework megatron")
        if plan.pp == 1:   # Megatron-Core model_parallel_config.py __post_init__
            raise PlanError("plan.defer_embedding_wgrad", "Megatron-Core cannot defer the embedding weight gradient "
                            "without pipeline parallelism ('Cannot defer embedding wgrad compute when pipeline model "
                            "parallel is not used')", "use pp > 1, or leave defer_embedding_wgrad out")
    storage = [k for k in ("adam_moments_dtype", "master_weights", "master_weights_dtype")
               if getattr(plan, k) is not None]
    if storage and (not fw.master_in_optimizer or plan.precision == "fp32"):
        why = (f"{fw.name} keeps fp32 parameters and steps them itself (no 16-bit model copy, no separate master)"
               if plan.precision != "fp32" else "fp32 training keeps no 16-bit copy and no separate master")
        raise PlanError(f"plan.{storage[0]}", why, f"leave {storage[0]} out")


def make_job(model: ModelSpec, cluster: ClusterSpec, plan: Plan, seq_len: int | None = None,
             framework: str = "megatron", tokens: float | None = None) -> TrainingJob:
    """A checked TrainingJob (dp and global batch resolved)."""
    s = model.max_seq_len if seq_len is None else seq_len
    if s <= 0:
        raise PlanError("seq_len", f"{s} must be positive", "give the training sequence length")
    resolved = check_plan(model, cluster, plan, s, framework)
    source = "default" if plan.global_batch is None else "given"
    try:
        return TrainingJob(model=model, cluster=cluster, plan=resolved, seq_len=s, framework=framework, tokens=tokens,
                           global_batch_source=source)
    except ValidationError as e:
        raise PlanError(*first_error(e, "job")) from None


__all__ = ["Framework", "FRAMEWORKS", "TrainingJob", "check_plan", "make_job", "stage_layer_split",
           "DEFAULT_TOKENS_PER_STEP", "default_global_batch"]
