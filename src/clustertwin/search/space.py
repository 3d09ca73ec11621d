"""The space of parallel plans for one job, and the plans it rules out before pricing any.

A candidate plan is a factorisation of the GPU count into tp x pp x cp x dp, an interleaving depth
vpp, an expert-parallel size ep (MoE), a micro-batch size, and the options sp, recompute, ZeRO
stage and the four overlaps. The raw domains:

- tp, pp, cp, dp: every ordered factorisation of the GPU count (tp within and across nodes), within
  the sizes a Plan accepts (cp <= 1024, say; likewise vpp, ep and mb below);
- vpp: the divisors of the layers and of the layers + 2 (the splits Megatron and NeMo accept);
- ep: the divisors of the routed experts (1 for a dense model); mb: the divisors of the global batch;
- sp, overlap_tp_comm: both values when tp > 1; overlap_pp_comm: when pp > 1; ZeRO 0-3 when
  dp*cp > 1, else 0 and 3; overlap_dp_comm: with ZeRO 0-2 and dp*cp > 1 (ZeRO-3 reduces gradients
  per micro-batch, which overlap_param_gather governs, except where the framework reduces once per
  step under PP: torchtitan); overlap_param_gather: with ZeRO >= 1 and
  dp*cp > 1; recompute: none, selective, full.

Options that change nothing under the rest of the plan (sequence parallelism without TP, say) are
not counted twice. A value held fixed (``--fix tp=8``) replaces its domain.

Each candidate is checked in the order ``check_plan`` checks a plan; the first failing check names
the reason it is pruned (``PRUNE_REASONS``), and the count of candidates each reason removes is
kept. Memory (the last check) is decided by the evaluator, which prices memory before time.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Iterator, Mapping

from ..cost.framework import get_framework
from ..errors import PlanError, SpecError
from ..schedule.batch import PlanSet, Structure
from ..specs import ClusterSpec, ModelSpec, stage_layer_split
from ..specs.plan import Plan

# reason key -> what it means (the keys are stable: they appear in the JSON output)
PRUNE_REASONS: dict[str, str] = {
    "tp_heads": "tp does not divide the attention heads",
    "tp_kv_heads": "tp and the KV heads do not divide each other",
    "tp_ffn": "tp does not divide the MLP width",
    "tp_nodes": "a TP group would straddle two nodes",
    "tp_overlap_nodes": "TP communication overlap held on, with a TP group beyond one NVLink domain",
    "vpp_without_pp": "interleaving (vpp > 1) without pipeline parallelism",
    "layer_split": "pp x vpp chunks exceed the layers",
    "cp_seq_len": "cp does not divide the sequence length",
    "etp_expert_width": "etp does not divide the expert MLP width",
    "ep_dp_cp": "ep x etp does not divide tp x cp x dp",
    "batch": "dp x micro-batch does not divide the global batch",
    "interleave_microbatches": "interleaving needs the micro-batches to be a multiple of pp",
    "memory": "does not fit in the memory allowed per GPU",
}

# plan fields --fix may hold (the rest of a plan is set by the job: precision, global batch)
FIXABLE = ("tp", "pp", "vpp", "dp", "cp", "ep", "etp", "sp", "zero_stage", "micro_batch", "recompute",
           "attention_kernel", "overlap_dp_comm", "overlap_param_gather", "overlap_tp_comm", "overlap_pp_comm",
           "moe_dispatcher", "grad_reduce_dtype")


def plan_limit(name: str) -> int:
    """The largest value a Plan accepts for a size (its validator's bound)."""
    for meta in Plan.model_fields[name].metadata:
        le = getattr(meta, "le", None)
        if le is not None:
            return int(le)
    return 2**62


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@dataclass(frozen=True)
class SearchSpace(PlanSet):
    """One job to search plans for: a model on a cluster at a global batch and sequence length.
    The options' domains are the PlanSet's (what the batch pricing enumerates); the space adds the
    sizes (factorizations, vpp, ep, micro-batch) and the checks that prune them."""

    # ---- domains ----------------------------------------------------------------------------
    @cached_property
    def vpp_domain(self) -> tuple[int, ...]:
        if "vpp" in self.fixed:
            return (self.fixed["vpp"],)
        L = self.model.num_layers
        return tuple(v for v in sorted(set(divisors(L)) | set(divisors(L + 2))) if v <= plan_limit("vpp"))

    @cached_property
    def ep_domain(self) -> tuple[int, ...]:
        if "ep" in self.fixed:
            return (self.fixed["ep"],)
        return tuple(e for e in divisors(self.model.moe_num_experts) if e <= plan_limit("ep")) if self.model.is_moe \
            else (1,)

    @cached_property
    def mb_domain(self) -> tuple[int, ...]:
        if "micro_batch" in self.fixed:
            return (self.fixed["micro_batch"],)
        return tuple(b for b in divisors(self.global_batch) if b <= plan_limit("micro_batch"))

    # ---- checks, in check_plan's order --------------------------------------------------------
    def tp_reason(self, tp: int) -> str | None:
        m, g = self.model, self.cluster.gpus_per_node
        if m.num_heads % tp:
            return "tp_heads"
        if m.kv_heads % tp and tp % m.kv_heads:
            return "tp_kv_heads"
        if m.ffn_hidden_size % tp:
            return "tp_ffn"
        if (tp > g and tp % g) or (tp < g and g % tp):
            return "tp_nodes"
        if tp > g and self.fixed.get("overlap_tp_comm") is True:
            return "tp_overlap_nodes"
        return None

    def layout_reason(self, pp: int, vpp: int) -> str | None:
        if vpp > 1 and pp == 1:
            return "vpp_without_pp"
        return None if self._splits(pp, vpp) else "layer_split"

    def _splits(self, pp: int, vpp: int) -> bool:
        key = (pp, vpp)
        cache = self.__dict__.setdefault("_split_cache", {})
        if key not in cache:
            try:
                stage_layer_split(self.model.num_layers, pp, vpp)
                cache[key] = True
            except PlanError:
                cache[key] = False
        return cache[key]

    def ep_reason(self, ep: int, dp_cp: int, tp: int = 1) -> str | None:
        if ep > 1:
            etp = self.fixed.get("etp") or tp
            if self.model.expert_ffn % etp:
                return "etp_expert_width"
            if (tp * dp_cp) % (ep * etp):
                return "ep_dp_cp"
        return None

    def batch_reason(self, dp: int, mb: int, pp: int, vpp: int) -> str | None:
        if self.global_batch % (dp * mb):
            return "batch"
        if vpp > 1 and (self.global_batch // (dp * mb)) % pp:
            return "interleave_microbatches"
        return None

    # ---- enumeration ------------------------------------------------------------------------
    def factorizations(self) -> Iterator[tuple[int, int, int, int]]:
        """Every (tp, pp, cp, dp) with tp*pp*cp*dp = the GPU count (within the sizes a Plan accepts)."""
        n = self.num_gpus
        lim = {k: plan_limit(k) for k in ("tp", "pp", "cp", "dp")}
        for tp in divisors(n):
            for pp in divisors(n // tp):
                for cp in divisors(n // (tp * pp)):
                    dp = n // (tp * pp * cp)
                    if tp <= lim["tp"] and pp <= lim["pp"] and cp <= lim["cp"] and dp <= lim["dp"]:
                        yield tp, pp, cp, dp

    def _fixed_mismatch(self, tp: int, pp: int, cp: int, dp: int) -> bool:
        f = self.fixed
        return any(k in f and f[k] != v for k, v in (("tp", tp), ("pp", pp), ("cp", cp), ("dp", dp)))

    def structures(self) -> tuple[list[Structure], dict[str, int], int]:
        """The structures that pass every check but memory, the candidates each reason pruned, and
        the number of candidates in the space."""
        pruned: dict[str, int] = {}
        total = 0
        valid: list[Structure] = []
        n_v, n_e, n_m = len(self.vpp_domain), len(self.ep_domain), len(self.mb_domain)
        seq = self.seq_len
        for tp, pp, cp, dp in self.factorizations():
            dp_cp = dp * cp
            options = self.option_count(tp, pp, dp_cp)
            subtree = n_v * n_e * n_m * options
            if self._fixed_mismatch(tp, pp, cp, dp):
                continue  # outside the space the user asked for
            total += subtree
            reason = self.tp_reason(tp)
            if reason:
                pruned[reason] = pruned.get(reason, 0) + subtree
                continue
            for vpp in self.vpp_domain:
                reason = self.layout_reason(pp, vpp) or ("cp_seq_len" if seq % cp else None)
                if reason:
                    pruned[reason] = pruned.get(reason, 0) + n_e * n_m * options
                    continue
                for ep in self.ep_domain:
                    reason = self.ep_reason(ep, dp_cp, tp)
                    if reason:
                        pruned[reason] = pruned.get(reason, 0) + n_m * options
                        continue
                    for mb in self.mb_domain:
                        reason = self.batch_reason(dp, mb, pp, vpp)
                        if reason:
                            pruned[reason] = pruned.get(reason, 0) + options
                            continue
                        valid.append(Structure(tp, pp, vpp, cp, dp, ep, mb))
        if total == 0:
            held = ", ".join(f"{k}={self.fixed[k]}" for k in ("tp", "pp", "cp", "dp") if k in self.fixed)
            raise PlanError("fix", f"no split of {self.num_gpus} GPUs into tp x pp x cp x dp has {held}",
                            "hold sizes whose product divides the GPU count")
        return valid, pruned, total


def make_space(model: ModelSpec, cluster: ClusterSpec, global_batch: int, seq_len: int, *, precision: str = "bf16",
               framework: str = "megatron", fix: str | Mapping[str, Any] | None = None,
               max_memory_fraction: float = 1.0) -> SearchSpace:
    """A checked SearchSpace; ``fix`` holds plan fields fixed, as text ("tp=8,recompute=full") or a mapping."""
    if not isinstance(global_batch, int) or global_batch <= 0:
        raise SpecError("global_batch", f"{global_batch!r} must be a positive number of sequences",
                        "give --global-batch, e.g. 1536")
    if not isinstance(seq_len, int) or seq_len <= 0:
        raise SpecError("seq_len", f"{seq_len!r} must be a positive number of tokens", "give --seq-len, e.g. 2048")
    if not 0 < max_memory_fraction <= 1:
        raise SpecError("max_memory_fraction", f"{max_memory_fraction!r} is not in (0, 1]",
                        "give the fraction of each GPU's memory a plan may use, e.g. 0.9")
    fixed = parse_fixed(fix)
    prec = fixed.pop("precision", precision)
    if prec not in ("bf16", "fp16", "fp8", "fp32"):
        raise SpecError("precision", f"unknown precision {prec!r}", "use bf16, fp16, fp8 or fp32")
    fw = get_framework(framework).name
    return SearchSpace(model, cluster, global_batch, seq_len, prec, fw, fixed, float(max_memory_fraction))


def parse_fixed(fix: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """Plan fields held fixed: "tp=8,pp=4,sp=1" (the --plan syntax) or a mapping of Plan fields."""
    from ..specs import make_plan, parse_plan
    if fix is None or fix == "":
        return {}
    plan: Plan = parse_plan(fix) if isinstance(fix, str) else make_plan(**dict(fix))
    fields = {k: getattr(plan, k) for k in plan.model_fields_set}
    if "global_batch" in fields:
        raise PlanError("fix.global_batch", "the global batch is part of the job, not of the plan searched",
                        "give it with --global-batch")
    extra = set(fields) - set(FIXABLE) - {"precision"}
    if extra:
        raise PlanError(f"fix.{sorted(extra)[0]}", "cannot be held fixed", f"fix one of {', '.join(FIXABLE)}")
    return fields
