"""Several jobs on one cluster: where a policy places them, what they take from each other on the
links they share, and when a queue of them finishes.

**Placement.** A job takes whole nodes. A switched cluster's nodes sit under leaf (top-of-rack /
rail) switch groups of ``nodes_per_leaf`` consecutive nodes; a torus cluster's under its optical
circuit switch blocks (``ocs_block``), or, without switches, one torus dimension row at a time.

* ``packed``: the lowest free nodes, in order (first fit).
* ``spread``: one node from each leaf in turn (round robin), as a scheduler that balances load
  over racks does.
* ``topology-aware``: the fewest leaves: a job that fits under one leaf takes the fullest leaf it
  fits in (best fit); a larger one takes whole free leaves, then the best fit for the rest.
* ``shape-folding`` (torus with optical circuit switches, RFold-style): a job takes whole OCS
  blocks wherever they are free; the switches join them into one slice ("folding" its shape onto
  the free blocks). ``packed`` on a torus takes consecutive blocks only (a slice without
  switches must be contiguous).

**Contention (switched networks).** A leaf's uplinks carry ``nodes_per_leaf`` x the node's NIC
bandwidth / the first tier's taper; with a second taper, a pod's uplinks carry ``nodes_per_pod``
x the NIC bandwidth / both tapers. Each job spanning several leaves (pods) sends its nodes'
traffic through the uplinks of each leaf (pod) it uses (the pricing's convention: a group crossing
the leaf pays the taper on all its traffic); a job under one leaf sends nothing up. When the
traffic of the jobs on a group exceeds its uplinks, each gets a share proportional to what it
sends: a job's effective taper at a tier is the worst ratio of demand to uplink capacity over its
groups of that tier (at least 1), and its collectives are priced with those tapers by the training
model (``predict_job``). Alone, the same rule gives its tapers without the others; the slowdown is
the ratio of the two step times. A torus slice has its links to itself: no contention there.

**Queue.** Jobs arrive at ``arrival_s`` and run ``steps`` steps. First come, first served, with
greedy backfill: when the job at the head does not fit, later jobs that fit start (this can delay
the head; no reservation). Whenever a job starts or ends, every running job's step time is priced
again with the jobs running then.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from ..constants import value
from ..errors import PlanError, SpecError
from ..specs.hardware import ClusterSpec
from ..units import has_unit

POLICIES = ("packed", "spread", "topology-aware", "shape-folding")
DEFAULT_STEPS = 1000
MAX_JOBS = 256


@dataclass(frozen=True)
class JobRequest:
    name: str
    model: str
    num_gpus: int
    plan: str = ""
    steps: int = DEFAULT_STEPS
    arrival_s: float = 0.0
    global_batch: int | None = None
    seq_len: int | None = None

    def nodes(self, gpus_per_node: int) -> int:
        return max(1, math.ceil(self.num_gpus / gpus_per_node))


@dataclass
class JobResult:
    name: str
    nodes: list[int]
    leaves: list[int]
    start_s: float
    end_s: float
    steps: int
    step_time_alone_s: float
    busy_s: float = 0.0                     # time-weighted step time integral helper
    sharing: dict[str, set[str]] = field(default_factory=dict)   # "leaf 3" -> other jobs on its uplinks
    worst_taper: float = 1.0

    @property
    def mean_step_time_s(self) -> float:
        return (self.end_s - self.start_s) / self.steps if self.steps else 0.0

    @property
    def slowdown(self) -> float:
        """Mean step time with the others over the step time alone, minus 1."""
        if not self.step_time_alone_s:
            return 0.0
        x = self.mean_step_time_s / self.step_time_alone_s - 1.0
        return 0.0 if abs(x) < 1e-9 else x

    def to_json(self) -> dict:
        return {"name": self.name, "nodes": self.nodes, "leaves": self.leaves, "start_s": self.start_s,
                "end_s": self.end_s, "steps": self.steps, "step_time_alone_s": self.step_time_alone_s,
                "mean_step_time_s": self.mean_step_time_s, "slowdown": self.slowdown,
                "worst_uplink_taper": self.worst_taper,
                "shares_uplinks_with": {k: sorted(v) for k, v in sorted(self.sharing.items()) if v}}


@dataclass
class Interval:
    """[start, end) with the jobs running and, per leaf, the jobs sending through its uplinks and
    their demand over the uplink capacity."""
    start_s: float
    end_s: float
    running: list[str]
    uplinks: dict[str, tuple[list[str], float]]


@dataclass
class PlacementResult:
    cluster: str
    policy: str
    num_nodes: int
    domain: str                          # "leaf" or "ocs block" or "torus row"
    nodes_per_domain: int
    jobs: list[JobResult]
    intervals: list[Interval]
    makespan_s: float
    utilization: float
    fragmentation: float
    unplaced: list[str]

    def to_json(self) -> dict:
        return {"schema": 1, "cluster": self.cluster, "policy": self.policy, "num_nodes": self.num_nodes,
                "domain": self.domain, "nodes_per_domain": self.nodes_per_domain,
                "jobs": [j.to_json() for j in self.jobs], "makespan_s": self.makespan_s,
                "utilization": self.utilization, "fragmentation": self.fragmentation, "unplaced": self.unplaced}


# ---- reading JOBS.yaml ---------------------------------------------------------------------------
def _int(raw: Any, where: str, lo: int = 1) -> int:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or raw != int(raw) or raw < lo:
        raise SpecError(where, f"{raw!r} is not a whole number of {lo} or more", "e.g. 64")
    return int(raw)


def read_jobs(path: str | Path) -> list[JobRequest]:
    """The jobs of a JOBS.yaml: ``jobs:`` a list of {name, model, num_gpus, plan, steps, arrival,
    global_batch, seq_len} (training jobs)."""
    from ..units import parse_quantity
    p = Path(path)
    if not p.is_file():
        raise SpecError("jobs", f"no file {str(path)!r}", "give a YAML file with a jobs: list (docs/cluster.md)")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise SpecError("jobs", f"{p.name} is not YAML ({' '.join(str(e).split())[:80]})", "fix the file") from None
    items = data.get("jobs") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise SpecError("jobs", f"{p.name} has no jobs: list", "write jobs: [{name: a, model: llama3-8b, num_gpus: 64}]")
    if len(items) > MAX_JOBS:
        raise SpecError("jobs", f"{len(items)} jobs is too many", f"give at most {MAX_JOBS}")
    known = {"name", "model", "num_gpus", "plan", "steps", "arrival", "global_batch", "seq_len", "kind"}
    out, names = [], set()
    for i, item in enumerate(items):
        where = f"jobs[{i}]"
        if not isinstance(item, dict):
            raise SpecError(where, "is not a mapping", "write {name: a, model: llama3-8b, num_gpus: 64}")
        extra = sorted(set(item) - known)
        if extra:
            raise SpecError(f"{where}.{extra[0]}", "unknown field", f"use {', '.join(sorted(known))}")
        kind = str(item.get("kind", "training"))
        if kind != "training":
            raise SpecError(f"{where}.kind", f"{kind!r} jobs are not modelled", "give training jobs (kind: training)")
        name = str(item.get("name", f"job{i}"))
        if name in names:
            raise SpecError(f"{where}.name", f"{name!r} is used twice", "give each job its own name")
        names.add(name)
        if "model" not in item or "num_gpus" not in item:
            raise SpecError(where, "needs model and num_gpus", "e.g. {name: a, model: llama3-8b, num_gpus: 64}")
        raw_arrival = item.get("arrival", "0s")
        if raw_arrival not in (0, "0") and not has_unit(raw_arrival):
            raise SpecError(f"{where}.arrival", f"{raw_arrival!r} has no unit", 'write it with one, e.g. "90s" or "15min"')
        arrival = parse_quantity(raw_arrival, "duration", f"{where}.arrival")
        out.append(JobRequest(name=name, model=str(item["model"]), num_gpus=_int(item["num_gpus"], f"{where}.num_gpus"),
                              plan=str(item.get("plan") or ""),
                              steps=_int(item.get("steps", DEFAULT_STEPS), f"{where}.steps"), arrival_s=arrival,
                              global_batch=_int(item["global_batch"], f"{where}.global_batch")
                              if item.get("global_batch") is not None else None,
                              seq_len=_int(item["seq_len"], f"{where}.seq_len") if item.get("seq_len") is not None
                              else None))
    return out


# ---- domains and placement policies --------------------------------------------------------------
def domains(cluster: ClusterSpec) -> tuple[str, int]:
    """(what a domain is, nodes per domain): leaves of a switched cluster; OCS blocks of a torus with
    optical switches; rows of the first dimension of a fixed torus."""
    if cluster.topology == "torus":
        if cluster.ocs_block:
            return "ocs block", math.prod(cluster.ocs_block)
        return "torus row", cluster.torus_dims[0]
    return "leaf", cluster.nodes_per_leaf


def _place(policy: str, need: int, free: list[bool], per: int, torus: bool) -> list[int] | None:
    """Node indices for a job of ``need`` nodes, or None when the policy finds no room."""
    n = len(free)
    nd = math.ceil(n / per)
    dom = [[i for i in range(d * per, min(n, (d + 1) * per))] for d in range(nd)]
    free_in = [[i for i in d if free[i]] for d in dom]
    if torus:
        # whole domains (blocks / rows): a slice owns its links
        k = math.ceil(need / per)
        whole = [d for d in range(nd) if len(free_in[d]) == len(dom[d])]
        if policy == "shape-folding":
            pick = whole[:k] if len(whole) >= k else None
        else:   # consecutive domains only: without switches (or packed) a slice is contiguous
            pick = None
            for s in range(nd - k + 1):
                if all(d in whole for d in range(s, s + k)):
                    pick = list(range(s, s + k))
                    break
        if pick is None:
            return None
        nodes = [i for d in pick for i in dom[d]]
        return nodes[:need]
    if sum(len(f) for f in free_in) < need:
        return None
    if policy == "packed":
        return [i for i in range(n) if free[i]][:need]
    if policy == "spread":
        dealt: list[int] = []
        queues = [list(f) for f in free_in]
        while len(dealt) < need:
            for q in queues:
                if q and len(dealt) < need:
                    dealt.append(q.pop(0))
        return sorted(dealt)
    # topology-aware: fewest leaves; the last part where it fits tightest (best fit)
    avail = {d: list(free_in[d]) for d in range(nd) if free_in[d]}
    out: list[int] = []
    while len(out) < need:
        rest = need - len(out)
        fits = [d for d in avail if len(avail[d]) >= rest]
        if fits:
            d = min(fits, key=lambda d: (len(avail[d]), d))
            out += avail[d][:rest]
            break
        d = max(avail, key=lambda d: (len(avail[d]), -d))
        out += avail.pop(d)
    return sorted(out)


def fragmentation(free: list[bool], per: int, contiguous: bool = False) -> float:
    """Share of the free nodes a job cannot take in one piece: those in partly used domains (leaves,
    blocks); with ``contiguous`` (a torus slice without optical switching) also those outside the
    longest run of wholly free domains. 0: all of the free capacity is usable at once."""
    n = len(free)
    total = sum(free)
    if not total:
        return 0.0
    whole = [all(free[d * per:(d + 1) * per]) for d in range(n // per)]
    if not contiguous:
        return 1.0 - sum(whole) * per / total
    best = run = 0
    for w in whole:
        run = run + 1 if w else 0
        best = max(best, run)
    return 1.0 - best * per / total


# ---- contention and pricing ----------------------------------------------------------------------
StepPricer = Callable[[JobRequest, ClusterSpec], float]


Load = dict[str, tuple[list[str], float]]


def switch_tiers(cluster: ClusterSpec) -> list[tuple[str, int, float]]:
    """(name, nodes under one switch group, taper of everything below its uplinks) of each tier whose
    uplinks jobs share: the leaf's (``tier_oversubscription[0]`` or ``oversubscription``) and, where
    the cluster gives a second taper, the pod's (``nodes_per_pod`` nodes, both tapers)."""
    if cluster.topology == "torus":
        return []
    tapers = cluster.tier_oversubscription or (cluster.oversubscription,)
    out = [("leaf", cluster.nodes_per_leaf, tapers[0])]
    if len(tapers) > 1:
        pod = cluster.nodes_per_pod or cluster.nodes_per_leaf * int(value("cluster.switch_radix"))
        out.append(("pod", pod, tapers[0] * tapers[1]))
    return out


def _chunks(nodes: list[int], per: int) -> dict[int, int]:
    out: dict[int, int] = {}
    for i in nodes:
        out[i // per] = out.get(i // per, 0) + 1
    return out


def uplink_load(cluster: ClusterSpec, placed: dict[str, list[int]]) -> Load:
    """Per switch group ("leaf 3", "pod 1"): the jobs sending through its uplinks (those spanning
    several groups of that tier) and their demand over the uplinks' capacity, both in nodes' worth
    of NIC bandwidth (a group of g nodes under a cumulative taper t has g / t)."""
    out: Load = {}
    for tier, per, taper in switch_tiers(cluster):
        cap = per / taper
        for name, nodes in placed.items():
            groups = _chunks(nodes, per)
            if len(groups) < 2:
                continue
            for g, m in groups.items():
                names, load = out.get(f"{tier} {g}", ([], 0.0))
                out[f"{tier} {g}"] = (names + [name], load + m / cap)
    return out


def job_tapers(cluster: ClusterSpec, nodes: list[int], load: Load) -> tuple[float, ...]:
    """The taper a job gets at each tier: its worst group's demand over capacity (at least 1, and at
    least the tier below's)."""
    out: list[float] = []
    for tier, per, _taper in switch_tiers(cluster):
        worst = max([1.0] + [load[f"{tier} {g}"][1] for g in _chunks(nodes, per) if f"{tier} {g}" in load])
        out.append(max([worst] + out))
    return tuple(out)


def job_cluster(cluster: ClusterSpec, req: JobRequest, nodes: list[int], tapers: tuple[float, ...]) -> ClusterSpec:
    """The cluster a job is priced on: its GPUs, its share of a leaf (and pod) as the leaf (and
    pod), and the tapers it gets there."""
    c = cluster.with_gpus(req.num_gpus)
    if cluster.topology == "torus":
        if not cluster.ocs_block:
            return c        # consecutive rows of the fixed torus: the slice torus_slice describes
        # whole blocks joined by the optical switches into the most even slice they can fold into
        block = cluster.ocs_block
        k = math.ceil(len(nodes) / math.prod(block))
        mult = [1] * len(block)
        for prime in _prime_factors(k):
            i = min(range(len(block)), key=lambda i: (block[i] * mult[i], i))
            mult[i] *= prime
        return c.model_copy(update={"torus_dims": tuple(b * m for b, m in zip(block, mult))})
    tiers = switch_tiers(cluster)
    leaf = max(1, min(_chunks(nodes, tiers[0][1]).values()))
    update: dict = {"oversubscription": tapers[0], "tier_oversubscription": (tapers[0],), "nodes_per_leaf": leaf}
    if len(tiers) > 1:
        pod = min(_chunks(nodes, tiers[1][1]).values())
        if pod > leaf:
            update.update(tier_oversubscription=(tapers[0], tapers[1] / tapers[0]), nodes_per_pod=pod)
        else:       # the job's part of each pod sits under one leaf: leaving the leaf leaves the pod
            update.update(oversubscription=tapers[1], tier_oversubscription=(tapers[1],))
    return c.model_copy(update=update)


def _prime_factors(k: int) -> list[int]:
    out, p = [], 2
    while k > 1:
        while k % p == 0:
            out.append(p)
            k //= p
        p += 1
    return sorted(out, reverse=True)


def default_step_pricer(cache: dict | None = None) -> StepPricer:
    """Step time of a training job on a cluster, by the training model (predict_job), cached."""
    from ..jobs import make_training_job
    from ..predict import predict_job
    memo: dict = {} if cache is None else cache

    def price(req: JobRequest, cluster: ClusterSpec) -> float:
        key = (req.name, repr(cluster))
        if key not in memo:
            job = make_training_job(req.model, cluster=cluster, plan=req.plan or None, global_batch=req.global_batch,
                                    seq_len=req.seq_len)
            pred = predict_job(job)
            if not pred.fits:
                raise PlanError(f"jobs.{req.name}.plan", "does not fit in GPU memory",
                                "choose a plan that fits (clustertwin search finds one)")
            memo[key] = pred.step_time_s
        return memo[key]
    return price


# ---- the queue -----------------------------------------------------------------------------------
def place_jobs(cluster: ClusterSpec, jobs: list[JobRequest], policy: str = "topology-aware",
               step_pricer: StepPricer | None = None) -> PlacementResult:
    """Place and run ``jobs`` on ``cluster`` under ``policy`` (FIFO with greedy backfill)."""
    if policy not in POLICIES:
        raise SpecError("policy", f"unknown policy {policy!r}", f"use one of {', '.join(POLICIES)}")
    torus = cluster.topology == "torus"
    if policy == "shape-folding" and not (torus and cluster.ocs_block):
        raise SpecError("policy", "shape-folding folds jobs onto optical-circuit-switch blocks of a torus",
                        "give a torus cluster with ocs_block, or use packed, spread or topology-aware")
    if policy == "spread" and torus:
        raise SpecError("policy", "spread scatters nodes over leaves; a torus slice must be whole blocks",
                        "use packed or shape-folding on a torus")
    g = cluster.gpus_per_node
    for r in jobs:
        if r.num_gpus > g and r.num_gpus % g:
            raise SpecError(f"jobs.{r.name}.num_gpus", f"{r.num_gpus} is not a multiple of {g} GPUs per node",
                            f"use a multiple of {g}")
        if r.nodes(g) > cluster.num_nodes:
            raise SpecError(f"jobs.{r.name}.num_gpus", f"{r.num_gpus} GPUs exceed the cluster's {cluster.num_gpus}",
                            "give fewer GPUs or a larger cluster")
    price = step_pricer or default_step_pricer()
    dom_name, per = domains(cluster)
    free = [True] * cluster.num_nodes
    pending = sorted(jobs, key=lambda r: r.arrival_s)
    running: dict[str, tuple[JobRequest, list[int], float]] = {}     # name -> (req, nodes, steps left)
    results: dict[str, JobResult] = {}
    intervals: list[Interval] = []
    t, frag_seen = 0.0, 0.0
    unplaced: list[str] = []
    for _ in range(4 * len(jobs) + 4):
        # start what fits: FIFO, then greedy backfill
        for r in [r for r in pending if r.arrival_s <= t]:
            nodes = _place(policy, r.nodes(g), free, per, torus)
            if nodes is None:
                continue
            for i in nodes:
                free[i] = False
            pending.remove(r)
            running[r.name] = (r, nodes, float(r.steps))
            alone = price(r, job_cluster(cluster, r, nodes, job_tapers(cluster, nodes,
                                                                        uplink_load(cluster, {r.name: nodes}))))
            results[r.name] = JobResult(r.name, nodes, sorted({i // per for i in nodes}), t, t, r.steps, alone)
            frag_seen = max(frag_seen, fragmentation(free, per, torus and policy != "shape-folding"))
        if not running:
            if not pending:
                break
            nxt = min(r.arrival_s for r in pending)
            if nxt <= t:    # nothing runs and the head cannot be placed on an empty cluster
                unplaced = [r.name for r in pending]
                break
            t = nxt
            continue
        load = uplink_load(cluster, {k: v[1] for k, v in running.items()})
        rates = {}
        for name, (r, nodes, _left) in running.items():
            tapers = job_tapers(cluster, nodes, load)
            res = results[name]
            res.worst_taper = max([res.worst_taper, *tapers])
            for key, (names, _load) in load.items():
                others = [x for x in names if x != name]
                if name in names and others:
                    res.sharing.setdefault(key, set()).update(others)
            rates[name] = price(r, job_cluster(cluster, r, nodes, tapers))
        finish = min(t + running[k][2] * rates[k] for k in running)
        arrivals = [r.arrival_s for r in pending if r.arrival_s > t]
        t_next = min([finish] + arrivals)
        intervals.append(Interval(t, t_next, sorted(running), load))
        for name in list(running):
            r, nodes, left = running[name]
            left -= (t_next - t) / rates[name]
            if left <= 1e-9 * r.steps:
                results[name].end_s = t_next
                for i in nodes:
                    free[i] = True
                del running[name]
            else:
                running[name] = (r, nodes, left)
        t = t_next
    makespan = max([j.end_s for j in results.values()] + [0.0])
    used = sum(len(j.nodes) * g * (j.end_s - j.start_s) for j in results.values())
    util = used / (cluster.num_gpus * makespan) if makespan > 0 else 0.0
    ordered = [results[r.name] for r in jobs if r.name in results]
    return PlacementResult(cluster.name, policy, cluster.num_nodes, dom_name, per, ordered, intervals, makespan,
                           util, frag_seen, unplaced)


# ---- who shares which link: a Perfetto (Chrome trace) view -----------------------------------------
def perfetto(result: PlacementResult) -> dict:
    """Chrome-trace JSON (ui.perfetto.dev): one track per job (when it runs, its step time against
    alone) and one per leaf uplink (which jobs send through it, their demand over its capacity)."""
    ev: list[dict] = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "jobs"}},
                      {"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "switch uplinks"}}]
    for k, j in enumerate(result.jobs):
        ev.append({"ph": "M", "pid": 1, "tid": k, "name": "thread_name", "args": {"name": j.name}})
        ev.append({"ph": "X", "pid": 1, "tid": k, "name": j.name, "ts": j.start_s * 1e6,
                   "dur": (j.end_s - j.start_s) * 1e6,
                   "args": {"nodes": len(j.nodes), "leaves": j.leaves, "slowdown": round(j.slowdown, 4)}})
    groups = sorted({g for iv in result.intervals for g in iv.uplinks}, key=lambda g: (g.split()[0], int(g.split()[1])))
    tid = {g: k for k, g in enumerate(groups)}
    for g in groups:
        ev.append({"ph": "M", "pid": 2, "tid": tid[g], "name": "thread_name", "args": {"name": f"{g} uplinks"}})
    for iv in result.intervals:
        for g, (names, load) in iv.uplinks.items():
            ev.append({"ph": "X", "pid": 2, "tid": tid[g], "name": " + ".join(names), "ts": iv.start_s * 1e6,
                       "dur": (iv.end_s - iv.start_s) * 1e6,
                       "args": {"jobs": names, "demand_over_capacity": round(load, 4)}})
    return {"displayTimeUnit": "ms", "traceEvents": ev}
