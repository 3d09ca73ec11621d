"""Goodput: a plan's step time turned into expected time-to-train under failures, checkpoints,
restarts and stragglers.

>>> from clustertwin import predict
>>> from clustertwin.reliability import estimate_goodput
>>> p = predict("llama3-8b", gpu="h100", num_gpus=1024, plan="tp=2,pp=1,zero=1", micro_batch=1,
...             global_batch=1024, seq_len=8192)
>>> g = estimate_goodput(p, 15e12)
>>> 0.8 < g.goodput < 1.0 and g.expected_time_to_train_s > g.ideal_time_to_train_s
True

The model (exact for Poisson failures; Daly 2006 for synchronous checkpoints, extended here to
checkpoints that become durable ``P`` seconds after the training stall): work W (seconds of
training at the straggler-adjusted step time) is cut into segments of tau seconds, each followed by
a stall C; segment j's checkpoint is durable P after its stall ends. After a failure the job restarts
(R, a random variable; failures during a restart restart it again) from the last durable checkpoint.
With failure rate lambda, B = tau + C and A = B + P:

    E[time per durable checkpoint] = (1 - exp(-lambda B)) / (lambda * E[exp(-lambda (R + A))])
    E[time to train]               = W / tau * that                      (+ planned interruptions)

For P = 0 and fixed R this is Daly's e^{lambda R} (e^{lambda (tau + C)} - 1) / lambda per segment.
The interval that minimises it is found numerically over whole steps; Young's sqrt(2 C MTBF) and
Daly's higher-order estimate are reported beside it. ``montecarlo.simulate`` replays the same model
event by event.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Mapping, Union

import numpy as np
from pydantic import Field, ValidationError, field_validator

from ..errors import SpecError
from ..specs.model import Frozen
from ..units import parse_quantity
from .checkpoint import CheckpointConfig, CheckpointCosts, RestartModel, checkpoint_costs, restart_model
from .policies import PolicyEffects
from .recovery import RecoveryParts
from .failures import FailureModel, load_failure_model
from .stragglers import StragglerModel, base_step_time_s, expected_group_slowdown, step_slowdown_from_group

MAX_STEPS = 2.0 ** 53          # steps must be countable exactly in a float64
MAX_MONTE_CARLO_RUNS = 100_000
MIN_GOODPUT = 1e-3             # below it the run is reported as one that never finishes

# Plausible range of the host-side checkpoint rates (bytes/s), checked where they are given (API and CLI):
# - floor 10 MB/s: a GPU's host link and a CPU's pickling are both far faster (the slowest measured rate here
#   is torch.save's ~0.67 GiB/s, CheckpointConfig); a rate below it is a unit slip (MB/s for GB/s) rather than
#   a host, and would price a 10 GB shard at over 15 minutes per checkpoint
# - pageable copy ceiling 450 GB/s: a device-to-host copy cannot outrun the GPU's host link, the fastest being
#   NVLink-C2C at 900 GB/s bidirectional, 450 GB/s each way (NVIDIA GH200 Grace Hopper Superchip datasheet)
# - serialisation ceiling 500 GB/s: serialising reads and writes host memory, no faster than one CPU socket's
#   memory bandwidth (NVIDIA Grace CPU datasheet: up to 500 GB/s LPDDR5X, the highest of current server CPUs)
HOST_RATE_BOUNDS_BYTES_PER_S: dict[str, tuple[float, float]] = {
    "pageable_copy_bytes_per_s": (10e6, 450e9),
    "serialize_bytes_per_s": (10e6, 500e9),
}


class GoodputOptions(Frozen):
    """Every option of ``estimate_goodput`` (keyword arguments of the same names)."""

    failure_model: Union[str, Path, FailureModel, None] = None
    mtbf_s: float | None = Field(None, description="job-level MTBF of unplanned failures; overrides the model's total")
    failure_rates: dict[str, float] | None = Field(None, description="per-unit-hour rates replacing the model's")
    planned_interruptions: bool = True
    checkpoint_interval_s: Union[float, Literal["auto"], None] = "auto"
    # checkpointing and restart (see CheckpointConfig for sources)
    checkpoint_mode: Literal["sync", "async", "async-serialized", "in-memory"] = "sync"
    checkpoint_writers: Literal["all", "dp-rank-0"] = "all"
    storage_write_bandwidth_bytes_per_s: float | None = None
    storage_read_bandwidth_bytes_per_s: float | None = None
    node_storage_bandwidth_bytes_per_s: float | None = None
    pageable_copy_bytes_per_s: float | None = None     # GPU -> pageable host copy (torch.save); see CheckpointConfig
    serialize_bytes_per_s: float | None = None         # torch.save serialisation per process; see CheckpointConfig
    detection_s: float | None = None
    reschedule_s: float | None = None
    spare_swap_s: float | None = None
    init_s: float | None = None
    warmup_steps: float | None = Field(None, ge=0, le=1e6)
    hot_spares: int | None = Field(None, ge=0, le=1_000_000)
    repair_s: float | None = None
    # stragglers (see StragglerModel for sources)
    stragglers: bool = True
    gpu_speed_cv: float | None = Field(None, ge=0, le=0.5)
    thermal_slowdown: float | None = Field(None, ge=0, le=0.5)
    slow_node_fraction: float | None = Field(None, ge=0, le=1)
    slow_node_slowdown: float | None = Field(None, ge=0, le=10)
    # Monte Carlo check of the analytic figure
    monte_carlo_runs: int = Field(0, ge=0, le=MAX_MONTE_CARLO_RUNS)
    seed: int = Field(0, ge=0, le=2**63 - 1)
    # fleets, recovery parts and policies (fleets.py, recovery.py, policies.py)
    fleet: Union[str, Path, Any, None] = Field(None, description="fleet preset or file; sets the failure model")
    policy: str = "restart"
    stop_s: float | None = None
    detection: Union[str, float, None] = Field(None, description="how failures are noticed: a mechanism of "
                                               "recovery.DETECTION or a duration; default the policy's")
    init_scaling: Literal["fixed", "megascale", "stock-megatron"] | None = None
    migration_s: float | None = Field(None, ge=0)
    replan_s: float | None = Field(None, ge=0)
    replan_step_time_s: float | None = Field(None, gt=0, description="the degraded plan's step time (replan)")
    step_time_s: float | None = Field(None, gt=0, description="a measured step time to price instead of the "
                                      "prediction's (a paper's setting as it states it)")
    replanner: Any = Field(None, description="callable(prediction, num_gpus) -> (step_time_s, plan text) or None")
    gpu_hour_price: float | None = Field(None, gt=0)

    model_config = Frozen.model_config | {"arbitrary_types_allowed": True}

    @field_validator("checkpoint_interval_s", mode="before")
    @classmethod
    def _interval(cls, v):
        if v is None or (isinstance(v, str) and v.strip().lower() == "auto"):
            return "auto"
        x = parse_quantity(v, "duration", "checkpoint_interval")
        if x <= 0:
            raise SpecError("checkpoint_interval", f"{v!r} must be positive", 'give a duration such as "30min", or "auto"')
        return x

    @field_validator("mtbf_s", mode="before")
    @classmethod
    def _mtbf(cls, v):
        if v is None:
            return v
        x = parse_quantity(v, "duration", "mtbf")
        if x <= 0:
            raise SpecError("mtbf", f"{v!r} must be a positive duration", "e.g. --mtbf 3h")
        return x

    @field_validator("storage_write_bandwidth_bytes_per_s", "storage_read_bandwidth_bytes_per_s",
                     "node_storage_bandwidth_bytes_per_s", "pageable_copy_bytes_per_s", "serialize_bytes_per_s",
                     mode="before")
    @classmethod
    def _bw(cls, v, info):
        if v is None:
            return v
        x = parse_quantity(v, "bandwidth", info.field_name)
        if x <= 0:
            raise SpecError(info.field_name, f"{v!r} must be positive", 'e.g. "2TB/s"')
        lo, hi = HOST_RATE_BOUNDS_BYTES_PER_S.get(info.field_name, (0.0, math.inf))
        if not lo <= x <= hi:
            from ..units import format_si
            raise SpecError(info.field_name, f"{v!r} = {format_si(x, 'B/s')} is not a plausible host rate",
                            f"give {format_si(lo, 'B/s')} to {format_si(hi, 'B/s')} (see docs/goodput.md), "
                            'e.g. "1.4GB/s"')
        return x

    @field_validator("policy", mode="before")
    @classmethod
    def _policy(cls, v):
        from .policies import parse_policy, policy_name
        if isinstance(v, str) and v.strip().lower() == "best":
            return "best"
        return policy_name(parse_policy(v))

    @field_validator("detection", mode="before")
    @classmethod
    def _detection(cls, v):
        from .recovery import DETECTION, detection_time_s
        if v is None:
            return v
        detection_time_s(v)
        return v.strip().lower() if isinstance(v, str) and v.strip().lower() in DETECTION else v

    @field_validator("detection_s", "reschedule_s", "spare_swap_s", "init_s", "repair_s", "stop_s", mode="before")
    @classmethod
    def _dur(cls, v, info):
        if v is None:
            return v
        x = parse_quantity(v, "duration", info.field_name)
        if info.field_name == "repair_s" and x <= 0:
            raise SpecError("repair_s", f"{v!r} must be positive", 'e.g. "24h"')
        return x


@dataclass
class MonteCarloSummary:
    runs: int
    seed: int
    mean_s: float
    std_s: float
    ci95_s: tuple[float, float]
    p5_s: float
    p50_s: float
    p95_s: float
    mean_failures: float
    lost_s: dict[str, float]
    p10_s: float = math.nan
    p90_s: float = math.nan
    goodput_p10: float = math.nan           # of a run (p10 of goodput is the slow runs' goodput)
    goodput_p50: float = math.nan
    goodput_p90: float = math.nan
    mean_goodput: float = math.nan
    gpu_hours_p10: float = math.nan
    gpu_hours_p50: float = math.nan
    gpu_hours_p90: float = math.nan
    cost_usd_p10: float | None = None
    cost_usd_p50: float | None = None
    cost_usd_p90: float | None = None
    spare_misses: float = 0.0               # mean replacements per run that found no spare free

    def to_json(self) -> dict[str, Any]:
        return {"runs": self.runs, "seed": self.seed, "mean_time_to_train_s": self.mean_s,
                "std_time_to_train_s": self.std_s, "ci95_time_to_train_s": list(self.ci95_s),
                "p5_time_to_train_s": self.p5_s, "p50_time_to_train_s": self.p50_s, "p95_time_to_train_s": self.p95_s,
                "mean_failures": self.mean_failures, "lost_s": dict(self.lost_s),
                "p10_time_to_train_s": self.p10_s, "p90_time_to_train_s": self.p90_s,
                "mean_goodput": self.mean_goodput, "goodput_p10": self.goodput_p10, "goodput_p50": self.goodput_p50,
                "goodput_p90": self.goodput_p90, "gpu_hours_p10": self.gpu_hours_p10,
                "gpu_hours_p50": self.gpu_hours_p50, "gpu_hours_p90": self.gpu_hours_p90,
                "cost_usd_p10": self.cost_usd_p10, "cost_usd_p50": self.cost_usd_p50,
                "cost_usd_p90": self.cost_usd_p90, "spare_misses": self.spare_misses}


@dataclass
class GoodputEstimate:
    """Expected time-to-train of a plan and where the time beyond the ideal goes.

    ``lost_s`` values sum to ``expected_time_to_train_s - ideal_time_to_train_s``;
    ``goodput = ideal / expected``."""

    tokens: float
    steps: int
    step_time_s: float
    ideal_time_to_train_s: float
    expected_time_to_train_s: float
    checkpoint_interval_s: float
    checkpoint_interval_steps: int
    expected_failures: float
    expected_planned_interruptions: float
    lost_s: dict[str, float]
    mtbf_s: float
    failure_rates_per_s: dict[str, float]
    planned_rate_per_s: float
    checkpoint: CheckpointCosts
    restart: RestartModel
    straggler_slowdown: float
    straggler_group_slowdown: float
    young_interval_s: float
    daly_interval_s: float
    goodput_at_young: float
    interval_source: str
    failure_model: str
    hot_spares: int
    monte_carlo: MonteCarloSummary | None = None
    params: "RunParams | None" = field(default=None, repr=False)
    fits: bool = True               # the plan fits in GPU memory (a time for one that does not is no answer)
    memory_per_gpu_bytes: float = 0.0
    hbm_bytes: float = 0.0
    recovery: "RecoveryParts | None" = None
    policy: "PolicyEffects | None" = None
    fleet: str | None = None
    num_gpus: int = 0
    gpu_hour_price: float | None = None
    fail_slow_events: float = 0.0
    # the ideal's step: every GPU at the mean speed (predict's step less its ``stragglers`` part), or the
    # measured step given; ``step_time_s`` is the step the run trains at, the wait for the slowest GPU in
    ideal_step_time_s: float = 0.0

    @property
    def job_mttf_s(self) -> float:
        """Mean time to a fail-stop interruption of the job (= mtbf_s)."""
        return self.mtbf_s

    @property
    def restart_time_s(self) -> float:
        """Mean recovery time of an unplanned failure under the policy (the parts: ``recovery``)."""
        return self.restart.mean_s

    @property
    def gpu_hours(self) -> float:
        """GPU-hours held for the expected run: the job's GPUs and the spare ones."""
        spare = self.policy.spare_gpus if self.policy is not None else 0
        t = self.expected_time_to_train_s
        return (self.num_gpus + spare) * t / 3600.0 if math.isfinite(t) else math.inf

    @property
    def cost_usd(self) -> float | None:
        return None if self.gpu_hour_price is None else self.gpu_hours * self.gpu_hour_price

    @property
    def goodput(self) -> float:
        if not math.isfinite(self.expected_time_to_train_s) or self.expected_time_to_train_s <= 0:
            return 0.0
        return self.ideal_time_to_train_s / self.expected_time_to_train_s

    @property
    def effective_training_time_ratio(self) -> float:
        """Time in training steps (straggler-slowed ones included) over elapsed time: Llama 3's
        "effective training time" and Kokolis et al.'s ETTR."""
        t = self.expected_time_to_train_s
        if not math.isfinite(t) or t <= 0:
            return 0.0
        return (self.ideal_time_to_train_s + self.lost_s["stragglers"]) / t

    @property
    def feasible(self) -> bool:
        """False when failures leave the run (almost) no progress: goodput below MIN_GOODPUT."""
        return math.isfinite(self.expected_time_to_train_s) and self.goodput >= MIN_GOODPUT

    def to_json(self) -> dict[str, Any]:
        def f(x: float) -> float | None:
            return float(x) if math.isfinite(x) else None
        ck = self.checkpoint
        out: dict[str, Any] = {
            "schema": 1,
            "fits": self.fits,
            "memory_per_gpu_bytes": self.memory_per_gpu_bytes,
            "hbm_bytes": self.hbm_bytes,
            "step_time_s": self.step_time_s,
            "ideal_step_time_s": self.ideal_step_time_s,
            "tokens": self.tokens,
            "steps": self.steps,
            "ideal_time_to_train_s": self.ideal_time_to_train_s,
            "expected_time_to_train_s": f(self.expected_time_to_train_s),
            "goodput": self.goodput,
            "effective_training_time_ratio": self.effective_training_time_ratio,
            "checkpoint_interval_s": self.checkpoint_interval_s,
            "checkpoint_interval_steps": self.checkpoint_interval_steps,
            "checkpoint_interval_source": self.interval_source,
            "expected_failures": f(self.expected_failures),
            "expected_planned_interruptions": f(self.expected_planned_interruptions),
            "lost_s": {k: f(v) for k, v in self.lost_s.items()},
            "mtbf_s": f(self.mtbf_s),
            "failure_model": self.failure_model,
            "failure_rates_per_s": dict(self.failure_rates_per_s),
            "planned_rate_per_s": self.planned_rate_per_s,
            "checkpoint": {"mode": ck.mode, "writers": ck.writers, "bytes": ck.bytes_total,
                           "bytes_per_gpu_max": ck.bytes_per_gpu_max, "save_s": ck.save_s,
                           "blocking_s": ck.blocking_s, "persist_s": ck.persist_s, "load_s": ck.load_s,
                           "young_interval_s": f(self.young_interval_s), "daly_interval_s": f(self.daly_interval_s),
                           "goodput_at_young": self.goodput_at_young},
            "restart": {"mean_s": self.restart.mean_s, "values_s": list(self.restart.values_s),
                        "probabilities": list(self.restart.probs), "planned_s": self.restart.planned_s,
                        "hot_spares": self.hot_spares, "spare_available": self.restart.spare_available},
            "stragglers": {"step_slowdown": self.straggler_slowdown, "group_slowdown": self.straggler_group_slowdown},
        }
        out["job_mttf_s"] = f(self.job_mttf_s)
        out["restart_time_s"] = self.restart_time_s
        if self.recovery is not None:
            out["recovery"] = self.recovery.to_json()
        out["fleet"] = self.fleet
        if self.policy is not None:
            out["policy"] = self.policy.to_json()
        out["gpu_hours"] = f(self.gpu_hours)
        out["cost_usd"] = None if self.cost_usd is None else f(self.cost_usd)
        out["fail_slow_events"] = self.fail_slow_events
        if self.monte_carlo is not None:
            out["monte_carlo"] = self.monte_carlo.to_json()
        return out


@dataclass(frozen=True)
class RunParams:
    """Everything the analytic model and the simulator need, in seconds and per-second rates."""

    work_s: float                 # training time at the straggler-adjusted step time
    step_s: float                 # straggler-adjusted step time
    interval_steps: int
    blocking_s: float             # C
    persist_s: float              # P
    rate_per_s: float             # lambda, unplanned
    planned_rate_per_s: float     # mu
    restart_values_s: tuple[float, ...]
    restart_probs: tuple[float, ...]
    planned_restart_s: float
    planned_cost_s: float | None = None          # per planned interruption; None: C + P + planned restart
    slow_rate_per_s: float = 0.0                 # fail-slow events
    slow_cost_s: float = 0.0
    # the recovery branches (in place, free spare, no spare free) and the spare pool, for the Monte Carlo's
    # explicit repair events; spares = 0 draws from restart_values_s / restart_probs instead
    branches_s: tuple[float, float, float] = (0.0, 0.0, 0.0)
    replace_share: float = 0.0
    spares: int = 0
    repair_s: float = 86400.0
    # degraded running (elastic-dp, replan): the Monte Carlo plays it out; the analytic model prices it as
    # time inside branch (c)
    degraded_loss: float = 0.0                   # throughput lost per missing node (0: no degraded mode)
    degraded_base_s: float = 0.0                 # branch (c) without the degraded time
    return_delay_s: float = 0.0                  # failure to the replacement's arrival
    rejoin_s: float = 0.0

    @property
    def tau_s(self) -> float:
        return self.interval_steps * self.step_s

    @property
    def planned_event_s(self) -> float:
        return self.blocking_s + self.persist_s + self.planned_restart_s if self.planned_cost_s is None else self.planned_cost_s

    def with_interval(self, k: int) -> "RunParams":
        return replace(self, interval_steps=k)


@dataclass(frozen=True)
class AnalyticResult:
    total_s: float
    checkpointing_s: float
    restart_s: float
    rework_s: float
    failures: float
    planned: float
    fail_slow_s: float = 0.0
    slow_events: float = 0.0


def expected_time(p: RunParams, k: np.ndarray | int | None = None) -> AnalyticResult | np.ndarray:
    """Expected time to finish ``p.work_s`` of training; with ``k`` an array of intervals (in steps),
    the vector of expected totals (for the optimiser)."""
    lam, mu = p.rate_per_s, p.planned_rate_per_s
    vector = k is not None
    kk = np.atleast_1d(np.asarray(k if vector else p.interval_steps, dtype=float))
    tau = kk * p.step_s
    B = tau + p.blocking_s
    A = B + p.persist_s
    R = np.asarray(p.restart_values_s, dtype=float)
    w = np.asarray(p.restart_probs, dtype=float)
    n_cycles = p.work_s / tau
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        if lam > 0:
            # log E[exp(-lambda (R + A))] by log-sum-exp, for each interval
            expo = -lam * (R[None, :] + A[:, None])
            top = expo.max(axis=1)
            log_s = top + np.log((w[None, :] * np.exp(expo - top[:, None])).sum(axis=1))
            log_cycle = np.log(-np.expm1(-lam * B)) - math.log(lam) - log_s
            total_u = np.exp(np.log(n_cycles) + log_cycle)
            restart_u = total_u * float((w * -np.expm1(-lam * R)).sum())
        else:
            total_u = n_cycles * B
            restart_u = np.zeros_like(total_u)
        ckpt_u = n_cycles * p.blocking_s
        running = np.maximum(total_u - restart_u, 0.0)
        planned = mu * running
        planned_down = planned * p.planned_event_s
        slow = p.slow_rate_per_s * running
        total = total_u + planned_down + slow * p.slow_cost_s
    if vector:
        return np.where(np.isfinite(total), total, np.inf)
    t = float(total[0])
    if not math.isfinite(t):
        return AnalyticResult(math.inf, math.inf, math.inf, math.inf, math.inf, math.inf)
    if p.planned_cost_s is None:
        ck = float(ckpt_u[0] + planned[0] * (p.blocking_s + p.persist_s))
        rs = float(restart_u[0] + planned[0] * p.planned_restart_s)
    else:
        ck = float(ckpt_u[0])
        rs = float(restart_u[0] + planned[0] * p.planned_cost_s)
    fs = float(slow[0] * p.slow_cost_s)
    rework = t - p.work_s - ck - rs - fs
    return AnalyticResult(t, ck, rs, max(rework, 0.0), float(lam * total_u[0]), float(planned[0]), fs, float(slow[0]))


def min_interval_steps(p: RunParams) -> int:
    """Fewest steps between checkpoints: the previous checkpoint must be durable before the next stall
    ends (tau + C >= P)."""
    need = max(0.0, p.persist_s - p.blocking_s)
    return max(1, int(math.ceil(need / p.step_s - 1e-12)))


def optimal_interval_steps(p: RunParams, total_steps: int) -> int:
    """The whole number of steps between checkpoints that minimises the expected time to train."""
    lo = min_interval_steps(p)
    hi = max(lo, int(total_steps))
    if hi - lo <= 2048:
        ks = np.arange(lo, hi + 1, dtype=float)
    else:
        ks = np.unique(np.round(np.geomspace(lo, hi, 600)))
    t = expected_time(p, ks)
    i = int(np.argmin(t))
    if hi - lo > 2048:  # refine between the neighbouring grid points
        a = int(ks[max(0, i - 1)])
        b = int(ks[min(len(ks) - 1, i + 1)])
        fine = np.arange(a, b + 1, dtype=float)
        if len(fine) > 20000:
            fine = np.unique(np.round(np.linspace(a, b, 20000)))
        tf = expected_time(p, fine)
        return int(fine[int(np.argmin(tf))])
    return int(ks[i])


def young_interval_s(blocking_s: float, mtbf_s: float) -> float:
    """Young (1974): tau = sqrt(2 C M)."""
    return math.sqrt(2.0 * blocking_s * mtbf_s)


def daly_interval_s(blocking_s: float, mtbf_s: float) -> float:
    """Daly (2006), higher-order estimate: sqrt(2CM) [1 + sqrt(C/2M)/3 + C/(18M)] - C for C < 2M, else M."""
    C, M = blocking_s, mtbf_s
    if C >= 2 * M:
        return M
    return math.sqrt(2 * C * M) * (1 + math.sqrt(C / (2 * M)) / 3 + C / (18 * M)) - C


def _count_steps(tokens: float, tokens_per_step: int) -> int:
    if isinstance(tokens, bool):
        raise SpecError("tokens", f"expected a number of tokens, got {tokens!r}", 'e.g. 15e12 or "15T"')
    t = parse_quantity(tokens, "count", "tokens")
    if t <= 0:
        raise SpecError("tokens", f"{tokens!r} must be positive", 'give the tokens to train, e.g. "15T"')
    steps = math.ceil(t / tokens_per_step)
    if steps > MAX_STEPS:
        raise SpecError("tokens", f"{t:.3g} tokens need {steps:.3g} steps of {tokens_per_step:,} tokens, more than "
                        "can be counted exactly (2^53)", "give fewer tokens or a larger global batch")
    return steps


def _options(options: Mapping[str, Any]) -> GoodputOptions:
    unknown = sorted(set(options) - set(GoodputOptions.model_fields))
    if unknown:
        raise SpecError(f"goodput.{unknown[0]}", "unknown option",
                        f"use one of {', '.join(GoodputOptions.model_fields)}")
    try:
        return GoodputOptions(**options)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or "goodput"
        msg = err["msg"]
        raise SpecError(loc, f"{msg[0].lower()}{msg[1:]} (got {err.get('input')!r})"[:200], "give a valid value") from None


def build_params(prediction, tokens: float, opts: GoodputOptions) -> tuple[RunParams, dict]:
    """Turn a prediction and the options into the run model's parameters (and the pieces behind them)."""
    from .fleets import FailSlow, load_fleet
    from .policies import parse_policy, policy_effects, spares_for, uses_spares
    from .recovery import DETECTION, RecoveryParts, detection_time_s, init_time_s, policy_detection
    job = prediction.job
    cluster = job.cluster
    steps = _count_steps(tokens, job.tokens_per_step)
    # the ideal step: every GPU at the mean speed (the prediction's step less its wait for the slowest
    # GPU, which the straggler model below prices again: the same model, counted once)
    step = opts.step_time_s if opts.step_time_s is not None else base_step_time_s(prediction)
    # failures: a fleet sets the failure model (and fail-slow events, and how init scales)
    fleet = None
    if opts.fleet is not None:
        if opts.failure_model is not None:
            raise SpecError("fleet", "give --fleet or --failure-model, not both",
                            "a fleet carries its failure model; drop --failure-model")
        fleet = load_fleet(opts.fleet)
        fm: FailureModel = fleet.failure_model
    else:
        fm = load_failure_model(opts.failure_model)
    if opts.failure_rates:
        fm = fm.with_rates(opts.failure_rates)
    if opts.mtbf_s is not None:
        fm = fm.with_job_mtbf(opts.mtbf_s, cluster)
    rates = fm.job_rates_per_s(cluster)
    lam = sum(rates.values())
    replace_rate = sum(r for k, r in rates.items() if fm.replaces(k))
    mu = fm.planned_rate_per_s(cluster) if opts.planned_interruptions else 0.0
    fail_slow = fleet.fail_slow if fleet is not None else FailSlow()
    # stragglers
    # the cluster's fleet (its StragglerModel priced the step's ``stragglers`` part), with any field given here
    sm = cluster.stragglers.model_copy(update={k: getattr(opts, k) for k in StragglerModel.model_fields
                                               if getattr(opts, k) is not None})
    if opts.stragglers:
        group = expected_group_slowdown(cluster.num_gpus, cluster.gpus_per_node, sm)
        slow = step_slowdown_from_group(prediction, group)
    else:
        group = slow = 0.0
    # the step the run trains at: predict's own step where goodput's straggler model is the one that priced
    # its ``stragglers`` part (the same number, to the last bit), else the ideal step stretched by the wait
    same = opts.step_time_s is None and opts.stragglers and sm == cluster.stragglers
    step_eff = prediction.step_time_s if same else step * (1.0 + slow)
    # policy, checkpoints and restarts
    parts = parse_policy(opts.policy)
    cfg_fields = {k: getattr(opts, k) for k in CheckpointConfig.model_fields
                  if k in GoodputOptions.model_fields and getattr(opts, k) is not None}
    cfg_fields["mode"] = "in-memory" if "in-memory-checkpoint" in parts else opts.checkpoint_mode
    cfg_fields["writers"] = opts.checkpoint_writers
    if cfg_fields.get("init_scaling") is None and fleet is not None:
        cfg_fields["init_scaling"] = fleet.init_scaling
    cfg = CheckpointConfig(**cfg_fields)
    cfg = cfg.model_copy(update={"init_s": init_time_s(cfg.init_scaling, cfg.init_s, cluster.num_gpus)})
    # detection: an explicit detection_s, else a mechanism (--detection), else the policy's mechanism
    if opts.detection_s is not None:
        mechanism = "given"
    else:
        mechanism = opts.detection if opts.detection is not None else policy_detection(parts)
        cfg = cfg.model_copy(update={"detection_s": detection_time_s(mechanism)})
        if not isinstance(mechanism, str) or mechanism not in DETECTION:
            mechanism = "given"

    if uses_spares(parts) and opts.hot_spares is None:
        cfg = cfg.model_copy(update={"hot_spares": spares_for(replace_rate, cfg.repair_s)})
    costs = checkpoint_costs(prediction, cfg)
    rec = RecoveryParts(detection_s=cfg.detection_s, stop_s=cfg.stop_s, reschedule_s=cfg.reschedule_s,
                        spare_swap_s=cfg.spare_swap_s, init_s=cfg.init_s, load_s=costs.load_s,
                        load_from="peer memory" if cfg.mode == "in-memory" else "storage",
                        warmup_s=cfg.warmup_steps * step_eff, init_scaling=cfg.init_scaling, detection=mechanism)
    replan_step, replan_source = opts.replan_step_time_s, ("given" if opts.replan_step_time_s else None)
    if "replan" in parts and replan_step is None and opts.replanner is not None:
        got = opts.replanner(prediction, cluster.num_gpus - cluster.gpus_per_node)
        if got is not None:
            replan_step, replan_source = float(got[0]), f"search: {got[1]}"
    spares_held = cfg.hot_spares if (uses_spares(parts) or parts == ("restart",)) else 0
    eff = policy_effects(parts, prediction=prediction, parts_rec=rec, costs=costs, config=cfg, spares=spares_held,
                         fail_slow=fail_slow, step_s=step_eff, replan_step_time_s=replan_step,
                         replan_source=replan_source,
                         **{k: getattr(opts, k) for k in ("migration_s", "replan_s") if getattr(opts, k) is not None})
    cfg_used = cfg.model_copy(update={"hot_spares": eff.spares})
    rm = restart_model(cfg_used, costs, step_eff, replace_rate, lam, branches=eff.branches_s)
    # with the state in the surviving replicas (elastic-dp, no sharded optimizer) the recovery point is the last
    # completed step and no periodic checkpoint is needed to recover from a node failure (Oobleck, Bamboo)
    held = eff.state_in_replicas
    params = RunParams(work_s=steps * step_eff, step_s=step_eff, interval_steps=1,
                       blocking_s=0.0 if held else costs.blocking_s,
                       persist_s=0.0 if held else costs.persist_s, rate_per_s=lam, planned_rate_per_s=mu,
                       restart_values_s=rm.values_s, restart_probs=rm.probs, planned_restart_s=rm.planned_s,
                       planned_cost_s=eff.planned_cost_s,
                       slow_rate_per_s=fail_slow.job_rate_per_s(cluster.num_nodes), slow_cost_s=eff.slow_cost_s,
                       branches_s=eff.branches_s, replace_share=rm.replace_share, spares=eff.spares,
                       repair_s=cfg.repair_s,
                       degraded_loss=0.0 if eff.degraded_throughput is None else 1.0 - eff.degraded_throughput,
                       degraded_base_s=eff.degraded_base_s, return_delay_s=eff.return_delay_s, rejoin_s=eff.rejoin_s)
    extra = dict(steps=steps, failure_model=fm, rates=rates, straggler_model=sm, group=group, slow=slow,
                 config=cfg_used, costs=costs, restart=rm, recovery=rec, policy=eff, fleet=fleet, fail_slow=fail_slow)
    return params, extra


def estimate_goodput(prediction, tokens: float | str | None = None, **options: Any) -> GoodputEstimate:
    """Expected time-to-train of ``prediction``'s plan for ``tokens`` tokens, and its goodput.

    Options (all keyword, all optional; see ``GoodputOptions``): ``failure_model`` (preset name, YAML
    file or ``FailureModel``; default llama3), ``mtbf_s``, ``failure_rates`` ({class: per-unit-hour}),
    ``planned_interruptions``, ``checkpoint_interval_s`` ("auto" or seconds), ``checkpoint_mode``
    (sync | async | async-serialized | in-memory), ``checkpoint_writers`` (all | dp-rank-0), storage and restart times,
    ``hot_spares``, straggler parameters (``stragglers=False`` turns them off), ``monte_carlo_runs``
    and ``seed``. Bad input raises a ClusterTwinError subclass with a one-line message.
    """
    opts = _options(options)
    if opts.policy == "best":
        return _best_policy(prediction, tokens, options)
    if tokens is None:
        tokens = prediction.job.tokens
        if tokens is None:
            raise SpecError("tokens", "missing", 'give the tokens to train, e.g. tokens=15e12 or --tokens 15T')
    params, x = build_params(prediction, tokens, opts)
    steps: int = x["steps"]
    costs: CheckpointCosts = x["costs"]
    # the interval
    if x["policy"].state_in_replicas:
        k, source = 1, "replicas"
    elif opts.checkpoint_interval_s == "auto":
        k = optimal_interval_steps(params, steps)
        source = "optimal"
    else:
        wanted = float(opts.checkpoint_interval_s)  # type: ignore[arg-type]
        if wanted < costs.save_s:
            raise SpecError("checkpoint_interval", f"{_fmt(wanted)} is shorter than one checkpoint save "
                            f"({_fmt(costs.save_s)}, {costs.mode})",
                            f"give at least {_fmt(math.ceil(costs.save_s))} or auto")
        k = max(1, int(round(wanted / params.step_s)))
        if k < min_interval_steps(params):
            k = min_interval_steps(params)
        source = "given"
    k = min(k, max(1, steps))
    params = params.with_interval(k)
    res = expected_time(params)
    assert isinstance(res, AnalyticResult)
    step_s = opts.step_time_s if opts.step_time_s is not None else base_step_time_s(prediction)
    ideal = steps * step_s
    lost = {"checkpointing": res.checkpointing_s, "rework": res.rework_s, "restart": res.restart_s,
            "stragglers": params.work_s - ideal}
    if params.slow_rate_per_s > 0:
        lost["fail_slow"] = res.fail_slow_s
    if math.isfinite(res.total_s):
        # the parts sum to expected - ideal (rework absorbs rounding; it is >= 0 mathematically)
        lost["rework"] = max(0.0, res.total_s - ideal - sum(v for k, v in lost.items() if k != "rework"))
    mtbf = 1.0 / params.rate_per_s if params.rate_per_s > 0 else math.inf
    young = young_interval_s(costs.blocking_s, mtbf)
    daly = daly_interval_s(costs.blocking_s, mtbf)
    k_young = max(min_interval_steps(params), min(max(1, steps), int(round(young / params.step_s)) or 1))
    t_young = expected_time(params.with_interval(k_young))
    assert isinstance(t_young, AnalyticResult)
    g_young = ideal / t_young.total_s if math.isfinite(t_young.total_s) else 0.0
    est = GoodputEstimate(
        tokens=float(parse_quantity(tokens, "count", "tokens")), steps=steps, step_time_s=params.step_s,
        ideal_step_time_s=step_s,
        ideal_time_to_train_s=ideal, expected_time_to_train_s=res.total_s,
        checkpoint_interval_s=params.tau_s, checkpoint_interval_steps=k, expected_failures=res.failures,
        expected_planned_interruptions=res.planned, lost_s=lost, mtbf_s=mtbf,
        failure_rates_per_s=dict(x["rates"]), planned_rate_per_s=params.planned_rate_per_s, checkpoint=costs,
        restart=x["restart"], straggler_slowdown=x["slow"], straggler_group_slowdown=x["group"],
        young_interval_s=young, daly_interval_s=daly, goodput_at_young=g_young, interval_source=source,
        failure_model=x["failure_model"].name, hot_spares=x["config"].hot_spares, params=params,
        fits=bool(prediction.fits), memory_per_gpu_bytes=float(prediction.memory.total_bytes),
        hbm_bytes=float(prediction.memory.capacity_bytes), recovery=x["recovery"], policy=x["policy"],
        fleet=None if x["fleet"] is None else x["fleet"].name, num_gpus=prediction.job.cluster.num_gpus,
        gpu_hour_price=opts.gpu_hour_price, fail_slow_events=res.slow_events)
    if opts.monte_carlo_runs:
        from .montecarlo import simulate
        est.monte_carlo = simulate(params, runs=opts.monte_carlo_runs, seed=opts.seed, ideal_s=ideal,
                                   held_gpus=est.num_gpus + x["policy"].spare_gpus, gpu_hour_price=opts.gpu_hour_price)
    return est


def _fmt(seconds: float) -> str:
    from ..units import format_duration
    return format_duration(seconds)


def _best_policy(prediction, tokens, options: Mapping[str, Any]) -> GoodputEstimate:
    """``policy="best"``: every policy of ``policies.COMPARED`` priced (analytic), the shortest expected
    time to train returned (its ``policy`` names the winner). What ``search --objective goodput --policy
    best`` ranks plans by, so plan and policy are chosen together."""
    from ..errors import ClusterTwinError
    from .policies import COMPARED
    best: GoodputEstimate | None = None
    for name in COMPARED:
        try:
            est = estimate_goodput(prediction, tokens, **{**options, "policy": name})
        except ClusterTwinError as e:
            if e.field != "policy":
                raise
            continue
        if best is None or est.expected_time_to_train_s < best.expected_time_to_train_s:
            best = est
    assert best is not None   # restart always applies
    return best
