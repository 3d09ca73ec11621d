"""Resilience policies: what each way of surviving failures changes in the run model.

A policy is one of ``POLICIES`` or a ``+``-joined combination (``in-memory-checkpoint+hot-spare``).
Every policy is priced with the same run model (goodput.py): failures at the fleet's rate roll the job
back to its last durable checkpoint and cost a recovery drawn from three branches, (a) in place (no node
to replace), (b) a node replaced by a free spare, (c) a node replaced with no spare free; what a policy
changes is the checkpoint scheme, the branch times, the planned and fail-slow costs, and what it holds
when nothing fails:

| policy | a failure costs | when nothing fails | source |
|---|---|---|---|
| ``restart`` | rollback + detection + stop + (reschedule) + init + load from storage + warm-up | checkpoint stalls | Llama 3 sec. 3.3.4; MegaScale |
| ``in-memory-checkpoint`` | as restart, but the checkpoint is a host-memory copy replicated to a peer node: tiny stall, so checkpoints every few steps and little rollback; load from the peer | 2 x the node's checkpoint shard of host memory | GEMINI (SOSP'23) |
| ``hot-spare`` | (b) swap in a spare (1 min) instead of (c) rescheduling; spares come back from repair after ``repair_s`` (explicit pool in the Monte Carlo) | idle spare nodes (GPU-hours) | Gemini Ultra report (hot standbys); ByteRobust (warm standby) |
| ``elastic-dp`` | (c) keep going on the surviving data-parallel replicas (the global batch is kept: survivors accumulate more micro-batches, so throughput is surviving / total replicas) until the replacement, asked for at detection, joins ``reschedule_s`` later, then a rejoin pause (init + copy of a node's state); a ZeRO-sharded optimizer loses its shard and reloads the checkpoint | nothing | Oobleck (SOSP'23), Bamboo (NSDI'23), ReCoVer |
| ``replan`` | fail-slow: micro-batches re-assigned by replica speed (``rebalanced_throughput``) until the node is repaired, instead of a drain; (c) re-plan for the surviving GPUs (the better of ``regrouped_throughput``, the survivors pooled into whole replicas, and ``replanner``: the search) and reload the checkpoint resharded; degraded throughput = old step / new step until the node returns, then re-plan back | nothing | ResiHP |
| ``live-migration`` | (a)(b) detection + ~20 s migration to a standby that warmed up in a sandbox (no init, no storage load); planned interruptions and fail-slow nodes are migrated away (20 s) instead of restarted; (c) as restart | standby nodes (GPU-hours) | TrainMover (arXiv 2412.12636 v3: ~20 s downtime at 1,024 GPUs) |

Combinations: any except ``restart`` with another (restart is the baseline) and ``elastic-dp`` with
``replan`` (two answers to the same missing node).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import SpecError

POLICIES = ("restart", "in-memory-checkpoint", "hot-spare", "elastic-dp", "replan", "live-migration")
# What `goodput --compare-policies` ranks by default: each policy alone and the combinations systems ship.
COMPARED = ("restart", "in-memory-checkpoint", "hot-spare", "elastic-dp", "replan", "live-migration",
            "in-memory-checkpoint+hot-spare", "in-memory-checkpoint+elastic-dp", "in-memory-checkpoint+live-migration")
_EXCLUSIVE = (("elastic-dp", "replan"),)

# TrainMover (arXiv 2412.12636 v3, abstract): "around 20 seconds of downtime when handling various
# interruptions at the 1024-GPU scale".
MIGRATION_S = 20.0
# ASSUMPTION: re-running the plan search for the survivors takes a minute (the search prices ~10^5 plans a
# minute on one CPU core; ResiHP's planner time is not used here).
REPLAN_S = 60.0
# ASSUMPTION: the spare pool is sized so a spare is free 99% of the time when none is given.
SPARE_AVAILABILITY = 0.99


def parse_policy(text: str | None) -> tuple[str, ...]:
    """The canonical tuple of a policy string ("restart", "hot-spare+in-memory-checkpoint", ...)."""
    if text is None:
        return ("restart",)
    if not isinstance(text, str) or not text.strip():
        raise SpecError("policy", f"{text!r} is not a policy", f"use one of {', '.join(POLICIES)} or A+B")
    parts = [p.strip().lower().replace("_", "-") for p in text.split("+")]
    for p in parts:
        if p not in POLICIES:
            raise SpecError("policy", f"unknown policy {p!r}", f"use one of {', '.join(POLICIES)}, joined with +")
    if len(set(parts)) != len(parts):
        raise SpecError("policy", f"{text!r} names a policy twice", "name each policy once")
    if "restart" in parts and len(parts) > 1:
        raise SpecError("policy", f"{text!r}: restart is the baseline and combines with nothing",
                        "drop restart, e.g. in-memory-checkpoint+hot-spare")
    for a, b in _EXCLUSIVE:
        if a in parts and b in parts:
            raise SpecError("policy", f"{a} and {b} cannot be combined (both answer the missing node)",
                            f"choose one, e.g. in-memory-checkpoint+{a}")
    return tuple(p for p in POLICIES if p in parts)


def policy_name(parts: tuple[str, ...]) -> str:
    return "+".join(parts)


def uses_spares(parts: tuple[str, ...]) -> bool:
    return "hot-spare" in parts or "live-migration" in parts


def spares_for(replace_rate_per_s: float, repair_s: float, availability: float = SPARE_AVAILABILITY) -> int:
    """Fewest spare nodes free with probability >= ``availability`` (nodes in repair ~ Poisson)."""
    from .checkpoint import poisson_cdf_below
    mean = replace_rate_per_s * repair_s
    k = 1
    while poisson_cdf_below(k, mean) < availability and k < 1_000_000:
        k += 1
    return k


def replicas_lost_per_node(plan, gpus_per_node: int) -> int:
    """Data-parallel replicas a node failure takes out (Megatron rank order tp, cp, dp, pp: a node's
    consecutive ranks are tp x cp groups of gpus_per_node / (tp x cp) replicas)."""
    return max(1, min(plan.dp, gpus_per_node // max(1, plan.tp * plan.cp)))


def regrouped_throughput(plan, gpus_per_node: int) -> float:
    """Throughput (fraction of healthy) after one node fails when the survivors are re-grouped, as ResiHP's
    scheduler does (arXiv 2605.06374: it resizes parallel groups, re-partitions the model and re-schedules the
    micro-batches): the replicas the node broke pool their surviving GPUs into as many whole replicas of the
    same shape as they fill, and the global batch's micro-batches are re-assigned over the replicas left
    (fractionally, as ``elastic-dp`` prices it). Elastic-dp keeps only the unbroken replicas.

    >>> from clustertwin.parallel import ParallelDims
    >>> round(regrouped_throughput(ParallelDims(tp=4, pp=4, dp=16), 8), 4)   # 2 broken replicas, 24 survivors
    0.9375
    """
    r = replicas_lost_per_node(plan, gpus_per_node)
    replica = plan.tp * plan.cp * plan.pp
    pooled = max(0, r * replica - gpus_per_node) // replica
    return (plan.dp - r + pooled) / plan.dp


def rebalanced_throughput(plan, slowdown: float) -> float:
    """Throughput (fraction of healthy) with one GPU ``slowdown`` times slower (fail-slow) when the
    micro-batches are re-assigned in proportion to each data-parallel replica's speed (ResiHP's straggler-
    aware scheduling): the replica holding the slow GPU runs at 1/slowdown and takes that share of the work,
    the others run at full speed. A system that keeps the plan waits for the slow GPU: 1/slowdown.

    >>> from clustertwin.parallel import ParallelDims
    >>> round(rebalanced_throughput(ParallelDims(tp=4, pp=4, dp=16), 2.0), 4)
    0.9688
    """
    if not (slowdown >= 1.0):
        raise SpecError("slowdown", f"{slowdown!r} must be at least 1 (times slower)", "e.g. 2.0")
    return (plan.dp - 1 + 1.0 / slowdown) / plan.dp


@dataclass(frozen=True)
class PolicyEffects:
    """What a policy does to the run model (all seconds unless named otherwise)."""

    name: str
    parts: tuple[str, ...]
    branches_s: tuple[float, float, float]     # in place, replaced by a free spare, replaced with no spare free
    planned_cost_s: float | None               # per planned interruption (None: checkpoint + planned restart)
    slow_cost_s: float                         # per fail-slow event
    spares: int                                # spare (standby) nodes held
    spare_gpus: int
    host_memory_bytes_per_node: float          # in-memory checkpoint copies (own + a peer's)
    degraded_throughput: float | None          # while a node is missing (elastic-dp, replan)
    degraded_s: float                          # how long a missing node is missing
    rejoin_s: float                            # the pause when it comes back
    replan_source: str | None
    degraded_base_s: float = 0.0               # branch (c) without the degraded time (the Monte Carlo plays it)
    return_delay_s: float = 0.0                # failure to the replacement's arrival
    notes: tuple[str, ...] = ()
    state_in_replicas: bool = False            # the survivors hold the whole state: a failure loses the step in flight

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "parts": list(self.parts), "recovery_branches_s": list(self.branches_s),
                "planned_cost_s": self.planned_cost_s, "fail_slow_cost_s": self.slow_cost_s, "spares": self.spares,
                "spare_gpus": self.spare_gpus, "host_memory_bytes_per_node": self.host_memory_bytes_per_node,
                "degraded_throughput": self.degraded_throughput, "degraded_s": self.degraded_s,
                "rejoin_s": self.rejoin_s, "replan_source": self.replan_source, "notes": list(self.notes),
                "state_in_replicas": self.state_in_replicas}


def policy_effects(parts: tuple[str, ...], *, prediction, parts_rec, costs, config, spares: int,
                   fail_slow, step_s: float, replan_step_time_s: float | None, replan_source: str | None,
                   migration_s: float = MIGRATION_S, replan_s: float = REPLAN_S) -> PolicyEffects:
    """The branch times and steady-state holdings of policy ``parts`` for ``prediction``'s plan."""
    plan = prediction.graph.plan
    cluster = prediction.job.cluster
    g = cluster.gpus_per_node
    rec = parts_rec
    in_place = rec.in_place_s
    spare_b = in_place + rec.spare_swap_s
    no_spare = in_place + rec.reschedule_s
    notes: list[str] = []
    degraded = None
    degraded_s = 0.0
    rejoin = 0.0
    degraded_base = return_delay = 0.0
    held = False
    live = "live-migration" in parts
    if live:
        in_place = rec.detection_s + rec.stop_s + migration_s
        spare_b = in_place
        notes.append("live-migration: a failure still rolls back to the last durable checkpoint")
    if "elastic-dp" in parts or "replan" in parts:
        r = replicas_lost_per_node(plan, g)
        if r >= plan.dp:
            raise SpecError("policy", f"{policy_name(parts)} needs more data-parallel replicas than a node holds "
                            f"(dp {plan.dp}, {r} on a node)", "use restart or hot-spare, or a plan with more dp")
        node_state = costs.bytes_per_node_max
        copy_s = node_state / max(cluster.node.nic_bandwidth_per_gpu * min(g, cluster.num_gpus), 1.0)
        if "elastic-dp" in parts:
            degraded = (plan.dp - r) / plan.dp
            sharded = getattr(plan, "zero_stage", 0) >= 1 and plan.dp > 1
            load = rec.load_s if sharded else 0.0
            if not sharded:
                # Oobleck (Jang et al., SOSP'23), abstract: "relies on already-replicated model states across the
                # replicas to provide fast recovery": the survivors go on from the last completed step
                notes.append("elastic-dp: every replica holds the full state; no checkpoint load, no rollback "
                             "beyond the step in flight")
                held = True
            base = rec.detection_s + rec.stop_s + rec.init_s + load + rec.warmup_s
            rejoin = rec.init_s + copy_s + rec.warmup_s
        else:
            # ResiHP's answers, best first: survivors re-grouped into whole replicas (never worse than keeping
            # the plan on the unbroken replicas, elastic-dp's answer), or a searched uniform plan
            regrouped = regrouped_throughput(plan, g)
            if replan_step_time_s is None or not (replan_step_time_s > 0):
                degraded = regrouped
                replan_source = "survivors re-grouped into whole replicas (no replanner given)"
            else:
                searched = min(1.0, prediction.step_time_s / replan_step_time_s)
                degraded = max(searched, regrouped)
                if regrouped >= searched:
                    replan_source = f"survivors re-grouped into whole replicas (beats {replan_source}: {searched:.1%})"
            base = rec.detection_s + rec.stop_s + replan_s + rec.init_s + rec.load_s + rec.warmup_s
            rejoin = replan_s + rec.init_s + rec.load_s + rec.warmup_s
        # the replacement is asked for once the failure is detected and arrives reschedule_s later; the job
        # resumed on the survivors after `base`, so it runs degraded for what is left of that wait
        degraded_s = max(0.0, rec.detection_s + rec.stop_s + rec.reschedule_s - base)
        no_spare = base + (1.0 - degraded) * degraded_s + rejoin
        if held:
            # no checkpoint is reloaded after any failure: a node that restarts in place (or is swapped for a
            # spare) leaves and rejoins at once, copying the state from a surviving replica
            in_place = spare_b = base + rejoin
        degraded_base, return_delay = base, rec.detection_s + rec.stop_s + rec.reschedule_s
    legacy = parts == ("restart",)        # --hot-spares with the default policy keeps its meaning
    n_spares = spares if uses_spares(parts) or legacy else 0
    if not (uses_spares(parts) or legacy) and spares:
        notes.append(f"{spares} hot spares given but {policy_name(parts)} does not use them")
    # planned interruptions and fail-slow nodes
    planned_cost = migration_s if live else None
    drain = costs.blocking_s + costs.persist_s + rec.init_s + rec.load_s + rec.warmup_s + (
        rec.spare_swap_s if n_spares else rec.reschedule_s)
    slow_cost = fail_slow.detect_s * fail_slow.slowdown / (1.0 + fail_slow.slowdown) + (migration_s if live else drain)
    if "replan" in parts and not live:
        # ResiHP keeps the slow node and re-assigns micro-batches by replica speed (a re-plan pause), losing
        # only the slow replica's missing speed until the node is repaired, instead of draining it
        rebalanced = rebalanced_throughput(plan, 1.0 + fail_slow.slowdown)
        slow_cost = min(slow_cost, fail_slow.detect_s * fail_slow.slowdown / (1.0 + fail_slow.slowdown) + replan_s
                        + (1.0 - rebalanced) * config.repair_s)
    host_mem = 2.0 * costs.bytes_per_node_max if "in-memory-checkpoint" in parts else 0.0
    return PolicyEffects(name=policy_name(parts), parts=parts, branches_s=(in_place, spare_b, no_spare),
                         planned_cost_s=planned_cost, slow_cost_s=slow_cost, spares=n_spares, spare_gpus=n_spares * g,
                         host_memory_bytes_per_node=host_mem, degraded_throughput=degraded, degraded_s=degraded_s,
                         rejoin_s=rejoin, replan_source=replan_source if "replan" in parts else None,
                         notes=tuple(notes), degraded_base_s=degraded_base, return_delay_s=return_delay,
                         state_in_replicas=held)


def check_spares(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError("hot_spares", f"{value!r} must be a non-negative whole number", "e.g. --hot-spares 4")
    return value


def finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


@dataclass
class PolicyResult:
    """One policy of a comparison: the analytic estimate and its Monte Carlo spread."""

    policy: str
    estimate: Any = None            # GoodputEstimate, None when the policy does not apply to the plan
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.estimate is None:
            return {"policy": self.policy, "applies": False, "why": self.error}
        e = self.estimate
        mc = e.monte_carlo
        out = {"policy": self.policy, "applies": True, "goodput": e.goodput,
               "effective_training_time_ratio": e.effective_training_time_ratio,
               "expected_time_to_train_s": finite(e.expected_time_to_train_s), "job_mttf_s": finite(e.job_mttf_s),
               "restart_time_s": e.restart_time_s, "checkpoint_interval_s": e.checkpoint_interval_s,
               "spare_gpus": e.policy.spare_gpus, "host_memory_bytes_per_node": e.policy.host_memory_bytes_per_node,
               "gpu_hours": finite(e.gpu_hours), "cost_usd": e.cost_usd, "lost_s": dict(e.lost_s)}
        if mc is not None:
            out.update({"time_to_train_p10_s": mc.p10_s, "time_to_train_p50_s": mc.p50_s,
                        "time_to_train_p90_s": mc.p90_s, "goodput_p10": mc.goodput_p10, "goodput_p50": mc.goodput_p50,
                        "goodput_p90": mc.goodput_p90, "gpu_hours_p10": mc.gpu_hours_p10,
                        "gpu_hours_p50": mc.gpu_hours_p50, "gpu_hours_p90": mc.gpu_hours_p90,
                        "cost_usd_p10": mc.cost_usd_p10, "cost_usd_p50": mc.cost_usd_p50,
                        "cost_usd_p90": mc.cost_usd_p90})
        return out


def compare_policies(prediction, tokens, policies: "tuple[str, ...] | list[str] | None" = None,
                     runs: int = 200, seed: int = 0, rank_by: str = "time", **options: Any) -> list[PolicyResult]:
    """Every policy (default ``COMPARED``) on ``prediction``'s job, analytic and ``runs`` Monte Carlo runs
    each (same ``seed``), best first: by expected time to train (``rank_by="time"``) or by GPU-hours held,
    spares included (``"cost"``). A policy that cannot apply to the plan (elastic-dp with dp = 1) is kept,
    last, with why."""
    from ..errors import ClusterTwinError
    from .goodput import estimate_goodput
    if rank_by not in ("time", "cost"):
        raise SpecError("rank_by", f"unknown {rank_by!r}", "use time or cost")
    if "policy" in options:
        raise SpecError("policy", "compare_policies takes policies=, not policy=", "e.g. policies=['restart', 'hot-spare']")
    names = [policy_name(parse_policy(p)) for p in (policies or COMPARED)]
    out: list[PolicyResult] = []
    for name in names:
        try:
            est = estimate_goodput(prediction, tokens, policy=name, monte_carlo_runs=runs, seed=seed, **options)
            out.append(PolicyResult(name, est))
        except ClusterTwinError as e:
            if getattr(e, "field", None) != "policy":
                raise
            out.append(PolicyResult(name, None, str(e)))

    def key(r: PolicyResult) -> float:
        if r.estimate is None:
            return math.inf
        return r.estimate.expected_time_to_train_s if rank_by == "time" else r.estimate.gpu_hours
    return sorted(out, key=key)
