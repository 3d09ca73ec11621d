"""TrainingJob: a model on a cluster under a plan, and the checks that the plan divides the job
(the rules themselves are one table, ``parallel/rules.py``)."""
from __future__ import annotations

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


class TrainingJob(Frozen):
    model: ModelSpec
    cluster: ClusterSpec
    plan: ResolvedPlan
    seq_len: int = Field(gt=0, le=100_000_000)
    framework: str = "megatron"
    tokens: float | None = Field(None, gt=0, description="tokens to train (for time-to-train)")

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
    if gb is None:   # enough micro-batches to fill the pipeline twice
        gb = dp * plan.micro_batch * max(1, plan.pp * (2 if plan.pp > 1 else 1))
    resolved = ResolvedPlan.of(plan, dp, gb)
    check_rules(JobFacts.of(model, cluster, seq_len, fw), PlanFacts.of(resolved))
    return resolved


def make_job(model: ModelSpec, cluster: ClusterSpec, plan: Plan, seq_len: int | None = None,
             framework: str = "megatron", tokens: float | None = None) -> TrainingJob:
    """A checked TrainingJob (dp and global batch resolved)."""
    s = model.max_seq_len if seq_len is None else seq_len
    if s <= 0:
        raise PlanError("seq_len", f"{s} must be positive", "give the training sequence length")
    resolved = check_plan(model, cluster, plan, s, framework)
    try:
        return TrainingJob(model=model, cluster=cluster, plan=resolved, seq_len=s, framework=framework, tokens=tokens)
    except ValidationError as e:
        raise PlanError(*first_error(e, "job")) from None


__all__ = ["Framework", "FRAMEWORKS", "TrainingJob", "check_plan", "make_job", "stage_layer_split"]
