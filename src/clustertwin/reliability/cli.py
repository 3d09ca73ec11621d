"""`clustertwin goodput`: the shared job flags (cli_options) plus tokens, failures, checkpoints and stragglers."""
from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional

import typer

from .. import cli_options as opts
from ..errors import PlanError, SpecError
from ..jobs import JobOptions


def _parse_rates(items: list[str] | None) -> dict[str, float] | None:
    if not items:
        return None
    out: dict[str, float] = {}
    for raw in items:
        for item in str(raw).split(","):
            item = item.strip()
            if not item:
                continue
            if "=" not in item:
                raise SpecError("failure_rate", f"cannot read {item!r}", "write CLASS=RATE, e.g. --failure-rate gpu=1.2e-5")
            key, value = (s.strip() for s in item.split("=", 1))
            try:
                rate = float(value)
            except ValueError:
                raise SpecError(f"failure_rate.{key}", f"{value!r} is not a number",
                                "give failures per unit-hour, e.g. gpu=1.2e-5") from None
            out[key] = rate
    return out or None


# ---- the failure/checkpoint options goodput and report share ------------------------------------
CheckpointIntervalOpt = typer.Option("auto", "--checkpoint-interval",
                                     help="auto (the goodput-optimal interval) or a duration, e.g. 30min")
MtbfOpt = typer.Option(None, "--mtbf", help="job MTBF of unplanned failures, e.g. 3h (keeps the model's mix)")
FailureModelOpt = typer.Option(None, "--failure-model",
                               help="llama3 | llama3-16k | kokolis-rsc1 | kokolis-rsc2 | opt-175b | a YAML file "
                                    "[default llama3]")
FailureRateOpt = typer.Option(None, "--failure-rate", help="CLASS=RATE per unit-hour, e.g. gpu=1.2e-5 (repeatable)")
NoPlannedOpt = typer.Option(False, "--no-planned", help="leave out planned interruptions")
CheckpointModeOpt = typer.Option("sync", "--checkpoint-mode", help="sync | async | async-serialized | in-memory")
CheckpointWritersOpt = typer.Option("all", "--checkpoint-writers",
                                    help="all (fully parallel save) | dp-rank-0 (Megatron legacy format)")
StorageBandwidthOpt = typer.Option(None, "--storage-bandwidth",
                                   help="aggregate storage bandwidth, e.g. 2TB/s [default 2TB/s]")
NodeStorageBandwidthOpt = typer.Option(None, "--node-storage-bandwidth",
                                       help="per-node path to storage, e.g. 400Gbps [default 50GB/s]")
PageableCopyBandwidthOpt = typer.Option(None, "--pageable-copy-bandwidth",
                                        help="GPU to pageable host memory copy per GPU (torch.save), e.g. 1.4GB/s "
                                             "[default 1.4GB/s]")
SerializeBandwidthOpt = typer.Option(None, "--serialize-bandwidth",
                                     help="torch.save serialisation per process, e.g. 700MB/s [default 2/3 GiB/s]")
HotSparesOpt = typer.Option(None, "--hot-spares", help="idle nodes ready to replace failed ones")


def goodput_options(*, failure_model, mtbf, failure_rate, no_planned, checkpoint_interval, checkpoint_mode,
                    checkpoint_writers, storage_bandwidth, node_storage_bandwidth, hot_spares, stragglers=None,
                    pageable_copy_bandwidth=None, serialize_bandwidth=None, **extra) -> dict:
    """The keyword options of estimate_goodput from the shared command-line options (checked).
    ``stragglers``: the job's (JobOptions.stragglers, from the shared --no-stragglers, --straggler-cv
    and --thermal-slowdown): the prediction's cluster carries them, and goodput reads them there."""
    if hot_spares is not None and hot_spares < 0:
        raise SpecError("hot_spares", f"{hot_spares} must be non-negative", "give a number of idle nodes, e.g. 2")
    _no_bare_number("checkpoint-interval", checkpoint_interval, "30min (or auto)")
    _no_bare_number("mtbf", mtbf, "3h")
    _no_bare_number("storage-bandwidth", storage_bandwidth, "2TB/s", "bandwidth")
    _no_bare_number("node-storage-bandwidth", node_storage_bandwidth, "400Gbps", "bandwidth")
    _no_bare_number("pageable-copy-bandwidth", pageable_copy_bandwidth, "1.4GB/s", "bandwidth")
    _no_bare_number("serialize-bandwidth", serialize_bandwidth, "700MB/s", "bandwidth")
    for name, flag, text in (("pageable_copy_bytes_per_s", "pageable-copy-bandwidth", pageable_copy_bandwidth),
                             ("serialize_bytes_per_s", "serialize-bandwidth", serialize_bandwidth)):
        if text is not None:
            extra[name] = _host_rate(flag, name, text)
    return dict(failure_model=failure_model, mtbf_s=mtbf, failure_rates=_parse_rates(failure_rate),
                planned_interruptions=not no_planned, checkpoint_interval_s=checkpoint_interval,
                checkpoint_mode=checkpoint_mode.strip().lower(), checkpoint_writers=checkpoint_writers.strip().lower(),
                storage_write_bandwidth_bytes_per_s=storage_bandwidth,
                storage_read_bandwidth_bytes_per_s=storage_bandwidth,
                node_storage_bandwidth_bytes_per_s=node_storage_bandwidth, hot_spares=hot_spares,
                stragglers=stragglers is not False, **extra)


def register(app: typer.Typer) -> None:
    from .. import cli as base

    @app.command()
    @opts.job_options(profile=True)
    def goodput(job: JobOptions, profile: Optional[Path],
                tokens: str = typer.Option(..., "--tokens", help='tokens to train, e.g. 15T or 1.5e12'),
                checkpoint_interval: str = CheckpointIntervalOpt, mtbf: Optional[str] = MtbfOpt,
                failure_model: str = FailureModelOpt, failure_rate: Optional[List[str]] = FailureRateOpt,
                no_planned: bool = NoPlannedOpt, checkpoint_mode: str = CheckpointModeOpt,
                checkpoint_writers: str = CheckpointWritersOpt, storage_bandwidth: Optional[str] = StorageBandwidthOpt,
                node_storage_bandwidth: Optional[str] = NodeStorageBandwidthOpt,
                pageable_copy_bandwidth: Optional[str] = PageableCopyBandwidthOpt,
                serialize_bandwidth: Optional[str] = SerializeBandwidthOpt,
                hot_spares: Optional[int] = HotSparesOpt,
                monte_carlo: int = typer.Option(0, "--monte-carlo", help="also simulate N runs (confidence interval)"),
                seed: int = typer.Option(0, "--seed", help="random seed of the Monte Carlo runs"),
                fleet: Optional[str] = typer.Option(None, "--fleet",
                                                    help="llama3-16k | meta-rsc | meta-rsc2 | opt-175b | a YAML "
                                                         "file: failure rates by component, fail-slow events"),
                policy: str = typer.Option("restart", "--policy",
                                           help="restart | in-memory-checkpoint | hot-spare | elastic-dp | replan | "
                                                "live-migration, or A+B"),
                compare_policies: bool = typer.Option(False, "--compare-policies",
                                                      help="rank every policy (Monte Carlo, 200 runs unless "
                                                           "--monte-carlo N)"),
                gpu_hour_price: Optional[float] = typer.Option(None, "--gpu-hour-price",
                                                               help="USD per GPU-hour: cost, spares included"),
                init_scaling: Optional[str] = typer.Option(None, "--init-scaling",
                                                           help="fixed | megascale | stock-megatron [default fixed]"),
                detection: Optional[str] = typer.Option(None, "--detection",
                                                        help="how failures are noticed: health-check (5 min) | "
                                                             "collective-timeout (10 min) | collective-tracing (15 s) "
                                                             "| a duration [default: the policy's]"),
                replace_time: Optional[str] = typer.Option(None, "--replace-time",
                                                           help="time to get a replacement node, e.g. 5min [default 5min]"),
                as_json: bool = typer.Option(False, "--json", help="print JSON (schema 1)")) -> None:
        """Expected time-to-train and goodput of a plan under failures, checkpoints, restarts and stragglers."""
        from ..jobs import job_from_options
        from ..predict import predict_job
        from ..report.console import goodput_tables, print_all
        from .goodput import MAX_MONTE_CARLO_RUNS, estimate_goodput
        if monte_carlo < 0 or monte_carlo > MAX_MONTE_CARLO_RUNS:
            raise SpecError("monte_carlo", f"{monte_carlo} runs is out of range", f"give 1 to {MAX_MONTE_CARLO_RUNS:,} (0 = off)")
        if seed < 0:
            raise SpecError("seed", f"{seed} must be non-negative", "e.g. --seed 0")
        from .policies import parse_policy
        if gpu_hour_price is not None and not (math.isfinite(gpu_hour_price) and gpu_hour_price > 0):
            raise SpecError("gpu_hour_price", f"{gpu_hour_price} must be a positive price", "e.g. --gpu-hour-price 2.5")
        if init_scaling is not None and init_scaling.strip().lower() not in ("fixed", "megascale", "stock-megatron"):
            raise SpecError("init_scaling", f"unknown {init_scaling!r}", "use fixed, megascale or stock-megatron")
        if compare_policies and policy.strip().lower() != "restart":
            raise SpecError("policy", "--policy and --compare-policies together",
                            "--compare-policies ranks every policy; drop --policy")
        parse_policy(policy)       # an unknown policy or a bad combination: one line before any pricing
        for name, text, example in (("detection", detection, "30s or health-check"), ("replace_time", replace_time, "5min")):
            _no_bare_number(name, text, example)
        if detection is not None:
            from .recovery import detection_time_s
            detection_time_s(detection)
        if fleet is not None:
            from .fleets import load_fleet
            load_fleet(fleet)
        options = goodput_options(failure_model=failure_model, mtbf=mtbf, failure_rate=failure_rate,
                                  no_planned=no_planned, checkpoint_interval=checkpoint_interval,
                                  checkpoint_mode=checkpoint_mode, checkpoint_writers=checkpoint_writers,
                                  storage_bandwidth=storage_bandwidth, node_storage_bandwidth=node_storage_bandwidth,
                                  pageable_copy_bandwidth=pageable_copy_bandwidth,
                                  serialize_bandwidth=serialize_bandwidth,
                                  hot_spares=hot_spares, stragglers=job.stragglers, monte_carlo_runs=monte_carlo,
                                  seed=seed,
                                  fleet=fleet, gpu_hour_price=gpu_hour_price, policy=policy,
                                  **({"init_scaling": init_scaling.strip().lower()} if init_scaling else {}),
                                  **({"reschedule_s": replace_time} if replace_time else {}),
                                  **({"detection": detection} if detection else {}))
        pred = predict_job(job_from_options(job), profile)
        if not pred.fits:   # a time to train for a run that cannot start is a wrong answer, not a pessimistic one
            raise PlanError("plan", f"does not fit: {pred.memory.total_bytes / 2**30:,.1f} GiB of "
                            f"{pred.memory.capacity_bytes / 2**30:,.0f} GiB per GPU (stage {pred.memory.critical_stage})",
                            "choose a plan that fits (recompute, a higher zero stage, more tp or pp; "
                            "`clustertwin search` finds one), then ask for its goodput")
        options["replanner"] = search_replanner
        if compare_policies:
            from ..report.console import print_all
            from .policies import compare_policies as compare
            options.pop("monte_carlo_runs")
            options.pop("policy")
            results = compare(pred, tokens, runs=monte_carlo or 200, rank_by="cost" if gpu_hour_price else "time",
                              **options)
            if as_json:
                base._emit_json({"schema": 1, "ranked_by": "cost" if gpu_hour_price else "time",
                                 "runs": monte_carlo or 200, "seed": seed,
                                 "policies": [r.to_json() for r in results]})
                return
            print_all(base.console, policy_tables(pred, results, gpu_hour_price))
            return
        est = estimate_goodput(pred, tokens, **options)
        if not est.feasible:
            raise SpecError("goodput", f"the run never finishes: failures every {_dur(est.mtbf_s)} against a "
                            f"{_dur(est.restart.mean_s)} restart and {_dur(est.checkpoint.blocking_s)} checkpoints",
                            "raise --mtbf, add --hot-spares or use --checkpoint-mode async")
        if as_json:
            base._emit_json(est.to_json())
            return
        print_all(base.console, goodput_tables(pred, est) + recovery_tables(est))


def _host_rate(flag: str, name: str, text: str) -> float:
    """A host checkpoint rate from the command line, in bytes/s, refused in one line naming the flag."""
    from ..units import format_si, parse_quantity
    from .goodput import HOST_RATE_BOUNDS_BYTES_PER_S
    x = parse_quantity(text, "bandwidth", flag)
    lo, hi = HOST_RATE_BOUNDS_BYTES_PER_S[name]
    if not lo <= x <= hi:
        raise SpecError(flag, f"{text.strip()!r} is not a plausible host rate",
                        f"give {format_si(lo, 'B/s')} to {format_si(hi, 'B/s')}, e.g. 1.4GB/s")
    return x


def _no_bare_number(field: str, text: Optional[str], example: str, what: str = "duration") -> None:
    """A quantity without a unit ("5": seconds? minutes? "1.4": bytes/s? GB/s?) is refused rather than guessed."""
    if text is None:
        return
    try:
        float(text.strip())
    except ValueError:
        return
    raise SpecError(field, f"{text.strip()!r} has no unit", f"give a {what} with its unit, e.g. {example}")


def _dur(seconds: float) -> str:
    from ..units import format_duration
    return format_duration(seconds) if math.isfinite(seconds) else "never"


def search_replanner(prediction, num_gpus: int):
    """The fastest plan for ``prediction``'s job (same global batch) on at most ``num_gpus`` GPUs, as
    ResiHP re-plans around a failed node: (step time, plan text), or None if no plan fits. The search
    needs a GPU count its dimensions divide, and uniform plans only: tried are ``num_gpus`` and the
    three largest counts below it with more factors of two; the fastest wins."""
    job = prediction.job
    key = (job.model.model_dump_json(), job.cluster.model_dump_json(), num_gpus, job.plan.global_batch, job.seq_len,
           job.plan.precision, job.framework)
    if key not in _REPLANS:
        _REPLANS[key] = _replan(job, num_gpus)
    return _REPLANS[key]


_REPLANS: dict = {}      # one search per job and GPU count in a process (compare-policies prices replan often)


def _replan(job, num_gpus: int):
    from ..errors import ClusterTwinError
    from ..search import search
    g = job.cluster.gpus_per_node
    counts: list[int] = []
    for k in range(0, 12):
        n = num_gpus if k == 0 else num_gpus // (g * 2 ** k) * (g * 2 ** k)
        if n > 0 and n not in counts:
            counts.append(n)
    best = None
    for n in counts[:4]:           # the survivors, then the largest counts below with more factors of two
        try:
            r = search(job.model, cluster=job.cluster.with_gpus(n), global_batch=job.plan.global_batch,
                       seq_len=job.seq_len, precision=job.plan.precision, framework=job.framework, top=1,
                       pareto_points=1)
        except ClusterTwinError:
            continue
        if r.plans and (best is None or r.plans[0].prediction.step_time_s < best[0]):
            top = r.plans[0]
            best = (top.prediction.step_time_s, f"{top.plan.short()} on {n:,} GPUs")
    return best


def recovery_tables(est) -> list:
    """The policy, its recovery parts and what it holds (for `clustertwin goodput`)."""
    from ..report.console import Col, Fit
    from ..units import format_si
    rec, pol = est.recovery, est.policy
    if rec is None or pol is None:
        return []
    rows = [["policy", pol.name + (f" (fleet {est.fleet})" if est.fleet else "")],
            ["job MTTF", _dur(est.job_mttf_s)],
            ["recovery", f"{_dur(est.restart_time_s)} mean: detect {_dur(rec.detection_s)} ({rec.detection}), "
                         f"init {_dur(rec.init_s)} "
                         f"({rec.init_scaling}), load {_dur(rec.load_s)} ({rec.load_from}), warm-up {_dur(rec.warmup_s)}"],
            ["node replaced", f"+{_dur(rec.reschedule_s)} (spare: +{_dur(rec.spare_swap_s)})"]]
    if pol.spare_gpus:
        rows.append(["holds", f"{pol.spares} spare nodes ({pol.spare_gpus:,} GPUs)"])
    if pol.host_memory_bytes_per_node:
        rows.append(["host memory", f"{format_si(pol.host_memory_bytes_per_node, 'B')} per node (checkpoint copies)"])
    if pol.degraded_throughput is not None:
        rows.append(["degraded", f"{pol.degraded_throughput * 100:.1f}% throughput for {_dur(pol.degraded_s)} per "
                                  f"missing node" + (f" ({pol.replan_source})" if pol.replan_source else "")])
    rows.append(["GPU-hours", f"{est.gpu_hours:,.0f}" + (f" = ${est.cost_usd:,.0f}" if est.cost_usd is not None else "")])
    return [Fit([Col("part"), Col("value", flex="wrap")], rows, "policy and recovery", show_header=False)]


_SHORT = {"restart": "restart", "in-memory-checkpoint": "in-mem", "hot-spare": "spare", "elastic-dp": "elastic",
          "replan": "replan", "live-migration": "migrate"}


def policy_tables(pred, results, price) -> list:
    """`goodput --compare-policies`: one row per policy, best first, within 80 columns."""
    from ..report.console import Col, Fit
    from ..units import format_si
    job = pred.job
    head = (f"{job.model.name} on {job.cluster.num_gpus:,} x {job.cluster.gpu.name} · plan "
            f"{pred.graph.plan.short()}")
    rows = []
    for i, r in enumerate(results, 1):
        name = "+".join(_SHORT[p] for p in r.policy.split("+"))
        if r.estimate is None:
            rows.append([str(i), name, "n/a", "", "", "", "", ""])
            continue
        e, mc = r.estimate, r.estimate.monte_carlo
        gp = f"{mc.goodput_p50 * 100:.1f}%" if mc else f"{e.goodput * 100:.1f}%"
        spread = f"{mc.goodput_p10 * 100:.1f}-{mc.goodput_p90 * 100:.1f}" if mc else ""
        cost = (_usd(mc.cost_usd_p50) if price and mc and mc.cost_usd_p50 is not None
                else _hours(mc.gpu_hours_p50 if mc else e.gpu_hours))
        mem = format_si(e.policy.host_memory_bytes_per_node, "B") if e.policy.host_memory_bytes_per_node else "-"
        rows.append([str(i), name, gp, spread, _dur(mc.p50_s if mc else e.expected_time_to_train_s), cost,
                     f"{e.policy.spare_gpus:,}" if e.policy.spare_gpus else "-", mem])
    cols = [Col("#", "right"), Col("policy"), Col("goodput", "right"), Col("p10-p90 %", "right", drop=2),
            Col("time p50", "right"), Col("USD p50" if price else "GPU-h p50", "right"),
            Col("spare GPUs", "right", drop=1), Col("host mem/node", "right", drop=3)]
    notes = [f"{r.policy}: {r.error}" for r in results if r.estimate is None]
    caption = ("in-mem = in-memory-checkpoint, spare = hot-spare, elastic = elastic-dp, migrate = live-migration; "
               "goodput and time are the Monte Carlo median, p10-p90 its spread" + ("; " + "; ".join(notes) if notes else ""))
    return [head, Fit(cols, rows, "policies, best first", caption=caption)]


def _hours(h: float) -> str:
    return f"{h / 1e6:,.2f}M" if h >= 1e6 else f"{h:,.0f}"


def _usd(x: float) -> str:
    return f"${x / 1e6:,.2f}M" if x >= 1e6 else f"${x:,.0f}"
