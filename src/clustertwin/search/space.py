"""The space of parallel plans for one job, and the plans it rules out before pricing any.

A candidate plan is a factorisation of the GPU count into tp x pp x cp x dp, an interleaving depth
vpp, an expert-parallel size ep (MoE), a micro-batch size, and the options sp, recompute, ZeRO
stage and the four overlaps. The raw domains:

- tp, pp, cp, dp: every ordered factorisation of the GPU count (tp within and across nodes), within
  the sizes a Plan accepts (cp <= 1024, say; likewise vpp, ep and mb below);
- vpp: the divisors of the layers and of the layers + 2 (the splits Megatron and NeMo accept);
- ep: the divisors of the routed experts (1 for a dense model); mb: the divisors of the global batch;
- sp: both values when tp > 1; overlap_tp_comm: both values when tp > 1 with sp (Megatron overlaps
  TP communication only under sequence parallelism: rule ``tp_overlap_sp``); overlap_pp_comm: when pp > 1; ZeRO 0-3 when
  dp*cp > 1, else 0 and 3; overlap_dp_comm: with ZeRO 0-2 and dp*cp > 1 (ZeRO-3 reduces gradients
  per micro-batch, which overlap_param_gather governs, except where the framework reduces once per
  step under PP: torchtitan); overlap_param_gather: with ZeRO >= 1 and
  dp*cp > 1; recompute: none, selective, full.

Options that change nothing under the rest of the plan (sequence parallelism without TP, say) are
not counted twice. A value held fixed (``--fix tp=8``) replaces its domain.

Each candidate is checked against the rules of ``parallel/rules.py``, the table ``check_plan``
reads, in its order: each loop level checks the rules whose fields it knows (``Rule.stage``), the
framework's capabilities last (structure first, then the options: ZeRO stage, TP overlap). The first
rule broken names the reason a candidate is pruned (``PRUNE_REASONS``), and the count of candidates
each reason removes is kept. Memory (the last check) is decided by the evaluator, which prices
memory before time and prices only the options the framework can run (``zero_allows``,
``flag_allows``).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Iterator, Mapping

from ..errors import PlanError, SpecError
from ..parallel.rules import RULES, Capabilities, PlanFacts, Rule, check_rules, first_broken, rules_at
from ..specs import ClusterSpec, ModelSpec
from ..specs.framework import get_framework
from ..schedule.batch import PlanSet, Structure
from ..specs.plan import FIXABLE, Plan, parse_fixed  # noqa: F401 (the search's --fix)

# reason key -> what it means (the keys are stable: they appear in the JSON output): the rules of
# parallel/rules.py the search can break, in their order, and memory, which the evaluator decides
# (the "job" rules refuse the whole search before it starts: no plan would keep them)
PRUNE_REASONS: dict[str, str] = {**{r.name: r.describe for r in RULES if r.stage not in ("job", "size")},
                                 "memory": "does not fit in the memory allowed per GPU"}

# plan fields --fix may hold (the rest of a plan is set by the job: precision, global batch)

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
    The options' domains are the PlanSet's (what the batch pricing enumerates, the framework's
    capabilities included); the space adds the sizes (factorizations, vpp, ep, micro-batch) and the
    rules that prune them.
    """

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

    # ---- checks: the rules of parallel/rules.py, stage by stage in their order ----------------
    @cached_property
    def _rules(self) -> dict[str, tuple[Rule, ...]]:
        rules = {stage: rules_at(stage) for stage in ("tp", "layout", "experts", "batch", "framework", "options")}
        if self.facts.can == Capabilities():    # a framework that runs every plan breaks no framework rule
            rules["framework"] = ()
            rules["options"] = tuple(r for r in rules["options"] if not r.name.startswith("framework_"))
        return rules

    @cached_property
    def _reasons(self) -> dict[tuple, str | None]:
        return {}   # memo of the checks below: the loops ask the same sizes often

    def _reason(self, key: tuple, p: PlanFacts) -> str | None:
        r = first_broken(self.facts, p, self._rules[key[0]])
        self._reasons[key] = reason = None if r is None else r.name
        return reason

    def tp_reason(self, tp: int) -> str | None:
        key = ("tp", tp)
        return self._reasons[key] if key in self._reasons else self._reason(
            key, PlanFacts(tp, overlap_tp=self.fixed.get("overlap_tp_comm") is True))

    def layout_reason(self, pp: int, vpp: int, cp: int = 1) -> str | None:
        key = ("layout", pp, vpp, cp)
        return self._reasons[key] if key in self._reasons else self._reason(
            key, PlanFacts(1, pp=pp, vpp=vpp, cp=cp, dualpipe=self.fixed.get("pp_schedule") == "dualpipe"))

    def ep_reason(self, ep: int, dp_cp: int, tp: int = 1) -> str | None:
        key = ("experts", ep, dp_cp, tp)
        return self._reasons[key] if key in self._reasons else self._reason(
            key, PlanFacts(tp, dp=dp_cp, ep=ep, etp=self.fixed.get("etp")))

    def batch_reason(self, dp: int, mb: int, pp: int, vpp: int) -> str | None:
        key = ("batch", dp, mb, pp, vpp)
        return self._reasons[key] if key in self._reasons else self._reason(
            key, PlanFacts(1, pp=pp, vpp=vpp, dp=dp, micro_batch=mb, global_batch=self.global_batch))

    def framework_reason(self, tp: int, vpp: int, cp: int, ep: int) -> str | None:
        """The first capability of the framework a structure needs and it lacks."""
        key = ("framework", tp, vpp, cp, ep)
        return self._reasons[key] if key in self._reasons else self._reason(
            key, PlanFacts(tp, vpp=vpp, cp=cp, ep=ep, etp=self.fixed.get("etp")))

    def option_reason(self, tp: int, pp: int, cp: int, dp: int, zero_stage: int, overlap_tp: bool,
                      sp: bool = True) -> str | None:
        """The first rule a structure's options (TP overlap with sp, ZeRO stage, and the framework's
        capabilities for them) break."""
        key = ("options", tp, pp, cp, dp, zero_stage, overlap_tp, sp)
        return self._reasons[key] if key in self._reasons else self._reason(
            key, PlanFacts(tp, pp=pp, cp=cp, dp=dp, zero_stage=zero_stage, overlap_tp=overlap_tp, sp=sp))

    def option_refusals(self, tp: int, pp: int, cp: int, dp: int) -> dict[str, int]:
        """Of the options of a structure (``option_count``), how many the framework cannot run, by
        the rule each breaks first (ZeRO stage, TP overlap)."""
        key = (tp, pp, cp, dp)
        cache = self.__dict__.setdefault("_refusal_cache", {})
        if key in cache:
            return cache[key]
        dp_cp = dp * cp
        rest = len(self.recompute_domain) * len(self.overlap_pp_domain(pp))
        out: dict[str, int] = {}
        for sp in self.sp_domain(tp):
            for otp in self.overlap_tp_domain(tp, sp):
                for z in self.zero_domain(dp_cp):
                    reason = self.option_reason(tp, pp, cp, dp, z, otp, sp)
                    if reason is not None:
                        n = len(self.overlap_param_gather_domain(dp_cp, z)) * len(self.overlap_dp_domain(dp_cp, z, pp))
                        out[reason] = out.get(reason, 0) + rest * n
        cache[key] = out
        return out

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
            refused = self.option_refusals(tp, pp, cp, dp)
            n_refused = sum(refused.values())
            for vpp in self.vpp_domain:
                reason = self.layout_reason(pp, vpp, cp)
                if reason:
                    pruned[reason] = pruned.get(reason, 0) + n_e * n_m * options
                    continue
                for ep in self.ep_domain:
                    reason = self.ep_reason(ep, dp_cp, tp)
                    if reason:
                        pruned[reason] = pruned.get(reason, 0) + n_m * options
                        continue
                    fw_reason = self.framework_reason(tp, vpp, cp, ep)
                    for mb in self.mb_domain:
                        reason = self.batch_reason(dp, mb, pp, vpp) or fw_reason
                        if reason:
                            pruned[reason] = pruned.get(reason, 0) + options
                            continue
                        if n_refused:
                            for k, v in refused.items():
                                pruned[k] = pruned.get(k, 0) + v
                        if n_refused < options:
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
    fixed = parse_fixed(fix, precision)
    prec = fixed.pop("precision", precision)
    if prec not in ("bf16", "fp16", "fp8", "fp32"):
        raise SpecError("precision", f"unknown precision {prec!r}", "use bf16, fp16, fp8 or fp32")
    held = {k: fixed[k] for k in ("tp", "pp", "cp", "dp") if k in fixed}
    product = 1
    for v in held.values():
        product *= v
    if cluster.num_gpus % product or ("dp" in held and len(held) == 4 and product != cluster.num_gpus):
        text = ", ".join(f"{k}={v}" for k, v in held.items())
        raise PlanError("fix", f"no split of {cluster.num_gpus} GPUs into tp x pp x cp x dp has {text}",
                        "hold sizes whose product divides the GPU count")
    fw = get_framework(framework).name
    space = SearchSpace(model, cluster, global_batch, seq_len, prec, fw, fixed, float(max_memory_fraction))
    check_rules(space.facts, PlanFacts(1, precision=prec), rules_at("job"))   # no plan of the job keeps them
    return space
