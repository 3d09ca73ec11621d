"""Discrete-event replay of one training iteration of the workload graph.

The replay runs the same graph with the same op durations as the analytic model (``Pricer``), on
per-rank streams with dependencies, in the order Megatron-LM schedules it:

1. Each block (embedding, layer, head) of one micro-batch is replayed op by op from its program
   (sim/program.py): compute on the compute stream, TP/CP/EP collectives on their streams, with the
   overlaps the plan allows. A collective starts when every member of its group is ready.
2. The pipeline is replayed pass by pass (1F1B or interleaved 1F1B: warm-up, steady state,
   cool-down): each pass runs its blocks back to back, waits for the activations (forward) or
   gradients (backward) the previous virtual stage sends over the pipeline link, and sends its own.
   A DualPipe plan runs DeepSeek's order instead (sim/dualpipe.py): each rank holds two stages and
   overlaps forward/backward pairs of two micro-batches.
3. Data parallelism: after the last micro-batch's backward of each chunk, its gradient buckets are
   reduced (overlapped with the rest of the backward when the plan says so), then the optimizer
   runs; the ZeRO parameter all-gather runs bucket by bucket under the first forward (or after the
   optimizer without overlap). FSDP gathers and reduces per layer and micro-batch (each unit its own
   collective, one unit of prefetch, each backward ending when its reduce-scatters are done, the
   compute slowed by what ran beside it at the end of each pass), or, once per step under PP
   (torchtitan), gathers each layer at its first forward and reduces in the last backward.
4. Links: each simulated rank has a NIC and an NVLink port (each direction); transfers in flight on
   one (gradient buckets and pipeline sends, say) share it.

Symmetry: ranks that differ only by their tensor- or context-parallel index, or by their
data-parallel replica, do the same work at the same times, so one rank stands for each pipeline stage
(pp ranks simulated, not tp x cp x dp x pp). With a slow GPU, its stage's TP x CP group is replayed
member by member (the slow GPU and its peers, which wait for it at every collective), its
data-parallel replica and one healthy replica are replayed side by side, and the gradient
collectives wait for both: 2 x pp ranks. Replicas coupled to the slow GPU through expert-parallel
all-to-alls are taken to run in its lockstep.
"""
from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass, field
from typing import Iterator

from ..cost.profile import HardwareProfile
from ..calibrate.profile import profile_for
from ..errors import PlanError
from ..schedule.step import OVERLAP_SLOWDOWN, Pricer, phase_host_idle, refuse_ep_overlap, runs_dualpipe
from ..specs import TrainingJob
from ..workload.graph import WorkloadGraph, build_graph, fsdp_keeps_root
from ..workload.ops import Op, Phase
from .dualpipe import build_dualpipe
from .engine import Engine
from .layout import Segment, StageDP, block_of, chunk_segments, segment_weight
from .program import Program, build_program, comm_latency
from .schedule import next_virtual, stage_order


@dataclass
class MicroProfile:
    """A block program replayed on the members of one TP x CP group: ``duration_s`` until every
    member is done; per member, (step index, start, end) of each step and its compute busy time."""

    program: Program
    factors: tuple[float, ...]
    duration_s: float
    events: list[list[tuple[int, float, float]]]
    busy_s: list[float]


def replay_program(prog: Program, factors: tuple[float, ...], pricer: Pricer) -> MicroProfile:
    """Replay one block program: member c runs its compute ``factors[c]`` times slower; collectives
    span all members and wait for all of them."""
    e = Engine()
    members = range(len(factors))
    comp = [e.stream(c, "compute") for c in members]
    tasks: list[list[int]] = []                 # step -> task per member
    for st in prog.steps:
        if st.is_comm:
            pl = pricer.groups.get(st.op.group)
            kind = "nic" if pl is not None and pl.nodes > 1 else "nvl"
            links = tuple(e.link(c, kind, d) for c in members for d in ("tx", "rx"))
            deps = {tasks[d][c] for d in st.deps for c in members}
            t = e.add([e.stream(c, st.stream.value) for c in members], st.duration_s - st.latency_s, deps,
                      st.latency_s, links)
            tasks.append([t] * len(factors))
        else:
            tasks.append([e.add((comp[c],), st.duration_s * factors[c], [tasks[d][c] for d in st.deps])
                          for c in members])
    total = e.run()
    events = [[(k, e.start[tasks[k][c]], e.end[tasks[k][c]]) for k in range(len(prog.steps))] for c in members]
    # the CP ring's NCCL kernels slow the compute they run beside (schedule.overlap_compute_slowdown), as
    # the analytic model prices it: added for the time they overlap, not replayed kernel by kernel
    ring = [[(a, b) for k, a, b in ev if prog.steps[k].is_comm and prog.steps[k].op.group == "cp"] for ev in events]
    comp_iv = [[(a, b) for k, a, b in ev if not prog.steps[k].is_comm] for ev in events]
    total += OVERLAP_SLOWDOWN * max((overlap_s(r, c) for r, c in zip(ring, comp_iv)), default=0.0)
    busy = [sum(st.duration_s for st in prog.steps if not st.is_comm) * f for f in factors]
    return MicroProfile(prog, factors, total, events, busy)


# ---- results ----------------------------------------------------------------------------------
@dataclass(slots=True)
class MacroTask:
    """A task of the pipeline-level replay on one simulated rank."""

    stream: str                       # compute | dp_comm | dp_rs | pp_comm
    name: str
    start_s: float
    end_s: float
    segments: tuple = ()              # compute: ((Segment, phase, MicroProfile), ...) run back to back
    chunk: int = -1
    microbatch: int = -1
    phase: str = ""                   # F | B | step
    op: Op | None = None
    fraction: float = 1.0
    peer: int = -1                    # pipeline send: the receiving stage
    slows: bool = False               # an FSDP collective whose slowdown of the compute beside it is replayed


@dataclass
class SimRank:
    """One simulated rank: stands for ``represents`` GPUs of pipeline stage ``stage``."""

    index: int
    stage: int
    replica: str                      # all | slow | healthy
    rank: int                         # the global rank shown for it
    represents: int
    factors: tuple[float, ...] = (1.0,)   # slowdown of its TP x CP group members (slow GPU first)
    tasks: list[MacroTask] = field(default_factory=list)
    stages: tuple[int, ...] = ()      # DualPipe: the two stages the rank holds (r and p-1-r); () = (stage,)

    @property
    def stage_label(self) -> str:
        """The stage(s) the rank runs: "1" or, under DualPipe, "1+2"."""
        return "+".join(str(s) for s in (self.stages or (self.stage,)))

    @property
    def end_s(self) -> float:
        return max((t.end_s for t in self.tasks), default=0.0)

    @property
    def compute_busy_s(self) -> float:
        """Time its compute stream is busy (blocks, including the communication they expose)."""
        return sum(t.end_s - t.start_s for t in self.tasks if t.stream == "compute")

    @property
    def last_backward_end_s(self) -> float:
        return max((t.end_s for t in self.tasks if t.stream == "compute" and t.phase == "B"), default=0.0)

    @property
    def first_compute_start_s(self) -> float:
        return min((t.start_s for t in self.tasks if t.stream == "compute"), default=0.0)

    def summary(self) -> dict[str, float]:
        busy = self.compute_busy_s
        opt = sum(t.end_s - t.start_s for t in self.tasks if t.phase == "step" and t.stream == "compute")
        return {"end_s": self.end_s, "compute_busy_s": busy - opt, "optimizer_s": opt,
                "idle_s": self.end_s - busy, "first_start_s": self.first_compute_start_s,
                "last_backward_end_s": self.last_backward_end_s,
                "dp_tail_s": max(0.0, self.end_s - self.last_backward_end_s - opt)}


@dataclass
class SimResult:
    job: TrainingJob
    graph: WorkloadGraph
    step_time_s: float
    ranks: list[SimRank]
    slow_rank: int | None
    slowdown: float
    tasks_simulated: int
    baseline_step_time_s: float | None = None   # the same replay without the slow GPU

    @property
    def num_microbatches(self) -> int:
        return self.graph.num_microbatches

    def rank_for(self, global_rank: int) -> tuple[SimRank, int]:
        """The simulated rank that stands for ``global_rank`` and which member of its group it is."""
        plan = self.graph.plan
        n = self.job.cluster.num_gpus
        if not 0 <= global_rank < n:
            raise PlanError("rank", f"{global_rank} is not a rank of this job", f"give a rank in 0..{n - 1}")
        tp, cp, dp = plan.tp, plan.cp, plan.dp
        stage = global_rank // (tp * cp * dp)
        d = (global_rank // (tp * cp)) % dp
        replica = "all"
        if self.slow_rank is not None and any(r.replica != "all" for r in self.ranks):
            replica = "slow" if d in _coupled_replicas(plan, self.slow_rank) else "healthy"
        for r in self.ranks:
            if r.stage == stage and r.replica == replica:
                member = 0 if (self.slow_rank is None or global_rank == self.slow_rank or len(r.factors) == 1) else 1
                return r, member
        raise PlanError("rank", f"no simulated rank stands for {global_rank}", "")  # pragma: no cover

    def to_json(self) -> dict:
        plan = self.graph.plan
        return {
            "schema": 1,
            "step_time_s": self.step_time_s,
            "baseline_step_time_s": self.baseline_step_time_s,
            "slow_rank": self.slow_rank,
            "slowdown": self.slowdown,
            "num_microbatches": self.num_microbatches,
            "simulated_ranks": len(self.ranks),
            "ranks_total": self.job.cluster.num_gpus,
            "tasks_simulated": self.tasks_simulated,
            "plan": plan.short(),
            "ranks": [{"rank": r.rank, "stage": r.stage, **({"stages": list(r.stages)} if r.stages else {}),
                       "replica": r.replica, "represents": r.represents, **r.summary()} for r in self.ranks],
        }


def _coupled_replicas(plan, slow_rank: int) -> set[int]:
    """Data-parallel replicas that run in the slow GPU's lockstep: its own, and those its
    expert-parallel all-to-alls wait on."""
    tp, cp, dp = plan.tp, plan.cp, plan.dp
    d = (slow_rank // (tp * cp)) % dp
    out = {d}
    if plan.ep > 1:
        idx = d * cp + (slow_rank // tp) % cp        # index within the dp x cp group (cp innermost)
        lo = (idx // plan.ep) * plan.ep
        out |= {k // cp for k in range(lo, lo + plan.ep)}
    return out


# ---- the replay ----------------------------------------------------------------------------------
class _Replay:
    def __init__(self, graph: WorkloadGraph, pricer: Pricer, slow_rank: int | None, slowdown: float):
        self.graph, self.pricer = graph, pricer
        plan = graph.plan
        self.plan = plan
        self.p, self.v, self.m = plan.pp, plan.vpp, graph.num_microbatches
        self.tp, self.cp, self.dp = plan.tp, plan.cp, plan.dp
        self.segments = chunk_segments(graph)
        self.programs: dict[tuple, Program] = {}
        self.micro: dict[tuple, MicroProfile] = {}
        self.e = Engine()
        self.slow_rank, self.slowdown = slow_rank, slowdown
        self.ranks: list[SimRank] = []
        n = self.tp * self.cp * self.dp
        if slow_rank is None:
            for i in range(self.p):
                self.ranks.append(SimRank(i, i, "all", i * n, n))
        else:
            coupled = _coupled_replicas(plan, slow_rank)
            s_stage = slow_rank // n
            group = self.tp * self.cp
            members = (slowdown, 1.0) if group > 1 else (slowdown,)
            slow_d = (slow_rank // group) % self.dp
            for i in range(self.p):
                f = members if i == s_stage else (1.0,)
                rep = slow_rank if i == s_stage else i * n + slow_d * group
                self.ranks.append(SimRank(len(self.ranks), i, "slow", rep, group * len(coupled), f))
            healthy = [d for d in range(self.dp) if d not in coupled]
            if healthy:
                for i in range(self.p):
                    self.ranks.append(SimRank(len(self.ranks), i, "healthy", i * n + healthy[0] * group,
                                              group * len(healthy)))
        self.by_stage: dict[int, list[SimRank]] = {}
        for r in self.ranks:
            self.by_stage.setdefault(r.stage, []).append(r)
        self._records: list[tuple[SimRank, MacroTask, int]] = []
        self._parts: dict[tuple, Op] = {}
        self._slowdown_tasks: dict[tuple, int] = {}   # (rank index, phase, chunk, micro-batch) -> task

    # -- programs and their replay
    def program(self, stage: int, block: str, phase: str) -> Program:
        sg = self.graph.stages[stage]
        b = block_of(sg, block)
        ops = b.fwd if phase == "F" else (b.recompute + b.bwd)
        key = (id(ops) if phase == "F" else (id(b.recompute), id(b.bwd)), phase)
        prog = self.programs.get(key)
        if prog is None:
            idle = (phase_host_idle(b.fwd, self.pricer) if phase == "F"
                    else phase_host_idle(b.recompute, self.pricer) + phase_host_idle(b.bwd, self.pricer))
            prog = self.programs[key] = build_program(ops, self.pricer, self.tp, bool(self.plan.overlap_tp_comm),
                                                      idle)
        return prog

    def profile(self, stage: int, block: str, phase: str, factors: tuple[float, ...]) -> MicroProfile:
        prog = self.program(stage, block, phase)
        key = (id(prog), factors)
        mp = self.micro.get(key)
        if mp is None:
            mp = self.micro[key] = replay_program(prog, factors, self.pricer)
        return mp

    # -- links
    def _link_kind(self, group: str) -> str:
        pl = self.pricer.groups.get(group)
        return "nic" if pl is not None and pl.nodes > 1 else "nvl"

    def _links(self, ranks: list[SimRank], group: str) -> tuple[int, ...]:
        kind = self._link_kind(group)
        return tuple(self.e.link(r.index, kind, d) for r in ranks for d in ("tx", "rx"))

    def _add(self, rank: SimRank, task: MacroTask, tid: int) -> int:
        rank.tasks.append(task)
        self._records.append((rank, task, tid))
        return tid

    def _collective(self, ranks: list[SimRank], op: Op, share: float, deps, name: str, stream: str = "dp_comm",
                    phase: str = "step", chunk: int = -1, mb: int = -1, own: bool = False, slows: bool = False) -> int:
        """``share`` of ``op`` on ``ranks``: a share of the priced collective (a gradient bucket of the
        stage's reduction), or (``own``) a collective of its own of ``share`` of the bytes, paying its
        own latency (FSDP's per-unit all-gathers and reduce-scatters, priced so by the analytic model)."""
        if own:
            part = _cached_part(self._parts, op, share)
            t, lat = self.pricer.time(part), comm_latency(self.pricer, part)
        else:
            t = self.pricer.time(op) * share
            lat = comm_latency(self.pricer, op) * share
        tid = self.e.add([self.e.stream(r.index, stream) for r in ranks], t - lat, deps, lat,
                         self._links(ranks, op.group))
        for r in ranks:
            self._add(r, MacroTask(stream, name, 0, 0, chunk=chunk, microbatch=mb, phase=phase, op=op,
                                   fraction=share, slows=slows), tid)
        return tid

    # -- the iteration
    def build(self) -> None:
        e, p, v, m, plan = self.e, self.p, self.v, self.m, self.plan
        sends: dict[tuple, int] = {}                 # (phase, replica, stage, chunk, mb) -> transfer into it
        recv_waits: list[tuple[int, tuple]] = []     # (task, key of the transfer it waits for)
        for i in range(p):
            sg = self.graph.stages[i]
            ranks = self.by_stage[i]
            chunks = self.segments[i]
            p2p_ops = {op.name: op for op in sg.p2p}
            dpw = StageDP.of(sg, chunks, plan)
            gather_ops, opt_op = dpw.gather_ops, dpw.optimizer
            fsdp = list(dpw.fsdp_ops)
            gate, release = dpw.gate, dpw.release
            # FSDP gathering once per step (torchtitan under PP: reshard_after_forward off): each layer's
            # parameters gathered at its chunk's first forward, prefetched as per micro-batch, and
            # copied out there (torch.distributed.pipelining keeps them unsharded until the last backward)
            step_gather = [op for op in gather_ops if op.name.startswith("fsdp.")]
            # this iteration's parameter all-gathers, bucket by bucket in forward order, under the first forwards
            gate_task: dict[tuple[int, int], int] = {}          # (chunk, segment) -> last all-gather it waits for
            if gate:
                for op, j, b in dpw.gather_order(v):
                    tid = self._collective(ranks, op, b.share, (), f"{op.name} c{j}", chunk=j)
                    for s in range(b.first, b.last + 1):
                        gate_task[(j, s)] = tid          # FIFO: the last one issued covers the earlier
            pass_cache: dict[tuple, tuple] = {}         # (chunk, phase, factors) -> (profiles, duration)
            send_cache: dict[tuple, tuple] = {}         # (phase, chunk) -> (op, work, latency, kind)
            peer = {(x.replica, x.stage): x for x in self.ranks}
            entry_f, entry_b = self._first_virtual("F"), self._first_virtual("B")
            link_cache: dict[tuple[int, int, str], tuple[int, int]] = {}
            last_compute: dict[int, int] = {}           # rank index -> its last compute task
            pending_block: dict[int, list[int]] = {}    # rank index -> blocking sends its next compute waits for
            release_tasks: dict[tuple[int, int, int], int] = {}   # (rank, chunk, segment) -> task
            fsdp_rs: list[int] = []
            for ph, j, k in stage_order(p, v, m, i):
                segs = chunks[j] if ph == "F" else chunks[j][::-1]
                idxs = list(range(len(segs))) if ph == "F" else list(range(len(segs) - 1, -1, -1))
                receives = (i, j) != (entry_f if ph == "F" else entry_b)
                extra = {r.index: pending_block.pop(r.index, ()) for r in ranks}
                # FSDP2 copying gradients in once per step: in the last micro-batch's backward, layer by layer
                step_in = dpw.copies("step", copy_in=True) if ph == "B" and k == m - 1 else ()
                first_f = ph == "F" and k == 0 and bool(step_gather)
                granular = (bool(fsdp) or (gate and ph == "F" and k == 0) or (release and ph == "B" and k == m - 1)
                            or bool(step_in) or first_f)
                copy_out = dpw.copies("fwd" if ph == "F" else "bwd") if fsdp else ()
                if first_f:
                    copy_out = dpw.copies("step")
                copy_in = (dpw.copies("", copy_in=True) if fsdp and ph == "B" else ()) + step_in
                pass_rs: list[int] = []          # this backward's FSDP reduce-scatters
                if granular:
                    seg_tasks: dict[int, list[int]] = {r.index: [] for r in ranks}
                    before = {r.index: last_compute.get(r.index) for r in ranks}
                    for q, (s, si) in enumerate(zip(segs, idxs)):
                        gathers = self._fsdp_gather(ranks, fsdp, ph, s, q, seg_tasks, before, j, k) if fsdp else []
                        if first_f:
                            gathers += self._fsdp_gather(ranks, step_gather, ph, s, q, seg_tasks, before, j, k,
                                                         any_phase=True)
                        for r in ranks:
                            mp = self.profile(i, s.block, ph, r.factors)
                            deps = list(extra[r.index])
                            extra[r.index] = []
                            if gate and ph == "F" and k == 0 and (j, si) in gate_task:
                                deps.append(gate_task[(j, si)])
                            deps += gathers
                            # FSDP2: the gathered buffer copied out into the layer's parameters first
                            self._copies(r, copy_out, s, deps, f"{ph}{j}.{k} {s.label}", ph, j, k)
                            tid = e.add((e.stream(r.index, "compute"),), mp.duration_s, deps)
                            self._add(r, MacroTask("compute", f"{ph}{j}.{k} {s.label}", 0, 0, ((s, ph, mp),), j, k,
                                                   ph), tid)
                            if q == 0 and receives:
                                recv_waits.append((tid, (ph, r.replica, i, j, k)))
                            seg_tasks[r.index].append(tid)
                            # FSDP2: the layer's gradients copied into the reduce-scatter buffer, before it
                            tid = self._copies(r, copy_in, s, (), f"{ph}{j}.{k} {s.label}", ph, j, k) or tid
                            last_compute[r.index] = tid
                            release_tasks[(r.index, j, si)] = tid
                        if fsdp and ph == "B":
                            rs = self._fsdp_reduce(ranks, fsdp, s, [last_compute[r.index] for r in ranks], j, k)
                            fsdp_rs += rs
                            pass_rs += rs
                            if not plan.overlap_dp_comm:     # the next layer waits for this one's reduction
                                for r in ranks:
                                    extra[r.index] = list(rs)
                else:
                    for r in ranks:
                        ck = (j, ph, r.factors)
                        cached = pass_cache.get(ck)
                        if cached is None:
                            profs = tuple((s, ph, self.profile(i, s.block, ph, r.factors)) for s in segs)
                            cached = pass_cache[ck] = (profs, sum(x[2].duration_s for x in profs))
                        profs, dur = cached
                        tid = e.add((e.stream(r.index, "compute"),), dur, extra[r.index])
                        self._add(r, MacroTask("compute", f"{ph}{j}.{k}", 0, 0, profs, j, k, ph), tid)
                        if receives:
                            recv_waits.append((tid, (ph, r.replica, i, j, k)))
                        last_compute[r.index] = tid
                if pass_rs:
                    # FSDP2 ends each backward waiting for its reduce-scatters (the root's post-backward
                    # callback: FSDPParamGroup.finalize_backward -> _wait_for_post_backward makes the current
                    # stream wait on each group's post-reduce event), so the next pass, and the next
                    # all-gathers (their copy-in stream waits on the current stream), start after them
                    for r in ranks:
                        tid = e.add((e.stream(r.index, "compute"),), 0.0, [last_compute[r.index]] + pass_rs)
                        self._add(r, MacroTask("compute", f"{ph}{j}.{k} fsdp.wait_reduce", 0, 0, (), j, k, ph), tid)
                        last_compute[r.index] = tid
                if fsdp:
                    # what the pass's FSDP collectives slowed the compute beside them (set after a first replay)
                    for r in ranks:
                        tid = e.add((e.stream(r.index, "compute"),), 0.0, [last_compute[r.index]])
                        self._add(r, MacroTask("compute", f"{ph}{j}.{k} fsdp.slowdown", 0, 0, (), j, k, ph), tid)
                        self._slowdown_tasks[(r.index, ph, j, k)] = tid
                        last_compute[r.index] = tid
                nxt = next_virtual(i, j, p, v, ph == "F")
                if nxt is not None:
                    sc = send_cache.get((ph, j))
                    if sc is None:
                        what = "activation" if ph == "F" else "gradient"
                        op = p2p_ops[f"pp.{what}.chunk{j}"]
                        t = self.pricer.time(op)
                        lat = comm_latency(self.pricer, op)
                        sc = send_cache[(ph, j)] = (op, t - lat, lat, self._link_kind("pp"), what)
                    op, work, lat, kind, what = sc
                    for r in ranks:
                        dst = peer[(r.replica, nxt[0])]
                        links = link_cache.get((r.index, dst.index, kind))
                        if links is None:
                            links = link_cache[(r.index, dst.index, kind)] = (e.link(r.index, kind, "tx"),
                                                                               e.link(dst.index, kind, "rx"))
                        sid = e.add((e.stream(r.index, "pp_comm"),), work, (last_compute[r.index],), lat, links)
                        self._add(r, MacroTask("pp_comm", f"send {what} {j}.{k}", 0, 0, (), j, k, ph, op=op,
                                               peer=nxt[0]), sid)
                        sends[(ph, r.replica, nxt[0], nxt[1], k)] = sid
                        if not plan.overlap_pp_comm:
                            pending_block.setdefault(r.index, []).append(sid)
            # gradient reduction, bucket by bucket, in the order the last backwards release them
            grad_tasks: list[int] = []
            for op, j, b in dpw.grad_order(stage_order(p, v, m, i), v):
                if release:
                    deps = [release_tasks[(r.index, j, b.release)] for r in ranks]
                else:
                    deps = [last_compute[r.index] for r in ranks]
                grad_tasks.append(self._collective(ranks, op, b.share, deps, f"{op.name} c{j}", chunk=j))
            opt_tasks = []
            for r in ranks:
                deps = grad_tasks + fsdp_rs + [last_compute[r.index]] + pending_block.pop(r.index, [])
                dur = self.pricer.time(opt_op) * max(r.factors) if opt_op is not None else 0.0
                tid = e.add((e.stream(r.index, "compute"),), dur, deps)
                self._add(r, MacroTask("compute", "optimizer.adam", 0, 0, (), phase="step", op=opt_op), tid)
                opt_tasks.append(tid)
            if gather_ops and not gate and not step_gather:  # ZeRO-1/2 without overlap: gather the new parameters now
                for op in gather_ops:
                    self._collective(ranks, op, 1.0, opt_tasks, op.name)
        for tid, key in recv_waits:
            src = sends.get(key)
            if src is None:  # pragma: no cover - every schedule feeds its receives
                raise RuntimeError(f"no pipeline send feeds {key}")
            e.depend(tid, src)

    def _first_virtual(self, ph: str) -> tuple[int, int]:
        """(stage, chunk) where a pass of phase ``ph`` enters the pipeline (receives nothing)."""
        return (0, 0) if ph == "F" else (self.p - 1, self.v - 1)

    def _copies(self, r: SimRank, ops, s: Segment, deps, label: str, ph: str, j: int, k: int) -> int | None:
        """FSDP2's copies ``ops`` of one layer (its share of each stage-wide op, by its parameters) on the
        compute stream of rank ``r`` after ``deps``; the last task added (None: none)."""
        tid = None
        for op in ops:
            total = sum(fsdp_weight(x, op, self.graph.framework) for x in self.all_segments(r.stage))
            w = fsdp_weight(s, op, self.graph.framework)
            if w <= 0 or total <= 0:
                continue
            share = w / total
            tid = self.e.add((self.e.stream(r.index, "compute"),), self.pricer.time(op) * share * max(r.factors),
                             deps)
            self._add(r, MacroTask("compute", f"{label} {op.name}", 0, 0, (), j, k, ph, op=op, fraction=share), tid)
        return tid

    # -- FSDP: per-layer parameter gathers (prefetched one layer ahead) and gradient reduce-scatters
    def _fsdp_gather(self, ranks: list[SimRank], fsdp: list[Op], ph: str, s: Segment, q: int,
                     seg_tasks: dict[int, list[int]], before: dict[int, int | None], j: int, k: int,
                     any_phase: bool = False) -> list[int]:
        """The all-gathers of one layer's parameters: with overlap issued when the layer before the
        previous one is done (one layer of prefetch), else when the previous layer is done.
        ``any_phase``: ``fsdp`` are the once-per-step gathers (gathered at the first forward)."""
        ahead = 2 if self.plan.overlap_param_gather else 1
        out = []
        want = "fwd" if ph == "F" else "bwd"
        for op in fsdp:
            if op.collective != "all_gather" or (op.phase.value != want and not any_phase):
                continue
            total = sum(fsdp_weight(x, op, self.graph.framework) for x in self.all_segments(ranks[0].stage))
            w = fsdp_weight(s, op, self.graph.framework)
            if w <= 0 or total <= 0:
                continue
            if q >= ahead:
                deps = [seg_tasks[r.index][q - ahead] for r in ranks]
            else:
                deps = [t for t in (before[r.index] for r in ranks) if t is not None]
            out.append(self._collective(ranks, op, w / total, deps, f"{op.name} {s.label}", phase=ph, chunk=j, mb=k,
                                        own=True, slows=not any_phase))
        return out

    def _fsdp_reduce(self, ranks: list[SimRank], fsdp: list[Op], s: Segment, deps: list[int], j: int,
                     k: int) -> list[int]:
        out = []
        for op in fsdp:
            if op.collective != "reduce_scatter":
                continue
            total = sum(segment_weight(x, op.group) for x in self.all_segments(ranks[0].stage))
            w = segment_weight(s, op.group)
            if w > 0 and total > 0:
                out.append(self._collective(ranks, op, w / total, deps, f"{op.name} {s.label}", stream="dp_rs",
                                            phase="B", chunk=j, mb=k, own=True, slows=True))
        return out

    def _slow_compute(self) -> bool:
        """FSDP's per-unit collectives slow the compute they run beside (schedule.overlap_compute_slowdown,
        s per second of overlap), each pass by what its own collectives overlapped, on the pass's
        critical path as the analytic model prices it per micro-batch (``exposed_fsdp``), so the
        slowed passes delay what waits for them (the pipeline's fill and drain): from a first replay,
        each pass's ``fsdp.slowdown`` task takes s times the time the rank's FSDP collectives ran
        beside the pass's compute, for a second replay. Whether there was any."""
        if not self._slowdown_tasks:
            return False
        e = self.e
        comm: dict[int, list[tuple[float, float]]] = {}
        for rank, task, tid in self._records:
            if task.slows:
                comm.setdefault(rank.index, []).append((e.start[tid], e.end[tid]))
        merged = {k: _merged(v) for k, v in comm.items()}
        starts = {k: [x for x, _ in v] for k, v in merged.items()}
        hidden: dict[int, float] = {}
        for rank, task, tid in self._records:
            key = (rank.index, task.phase, task.chunk, task.microbatch)
            slow = self._slowdown_tasks.get(key)
            if task.stream != "compute" or slow is None or slow == tid or rank.index not in merged:
                continue
            hidden[slow] = hidden.get(slow, 0.0) + _covered(merged[rank.index], starts[rank.index],
                                                            e.start[tid], e.end[tid])
        for slow, h in hidden.items():
            e.work[slow] = OVERLAP_SLOWDOWN * h
        return True

    def all_segments(self, stage: int) -> Iterator[Segment]:
        for segs in self.segments[stage]:
            yield from segs

    def run(self) -> float:
        total = self.e.run()
        if self._slow_compute():
            total = self.e.run()
        for rank, task, tid in self._records:
            task.start_s, task.end_s = self.e.start[tid], self.e.end[tid]
        # DP reductions and once-per-step parameter gathers slow the compute they overlap
        # (schedule.overlap_compute_slowdown): each rank's optimizer step, and what follows it, starts
        # that much later (added after the replay, not replayed kernel by kernel, as the analytic model
        # adds it once per step)
        for r in self.ranks:
            comm = [(t.start_s, t.end_s) for t in r.tasks if t.stream in ("dp_comm", "dp_rs") and not t.slows]
            comp = [(t.start_s, t.end_s) for t in r.tasks if t.stream == "compute" and t.phase != "step"]
            tax = OVERLAP_SLOWDOWN * overlap_s(comm, comp)
            if tax <= 0:
                continue
            step_start = min((t.start_s for t in r.tasks if t.phase == "step" and t.stream == "compute"),
                             default=r.end_s)
            for t in r.tasks:
                if t.start_s >= step_start:
                    t.start_s += tax
                    t.end_s += tax
                elif t.end_s > step_start:
                    t.end_s += tax
            total = max(total, r.end_s)
        return total


def _merged(iv: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for x, y in sorted(iv):
        if out and x <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], y))
        elif y > x:
            out.append((x, y))
    return out


def _covered(merged: list[tuple[float, float]], starts: list[float], a: float, b: float) -> float:
    """Seconds of [a, b] that the disjoint sorted intervals ``merged`` (their ``starts``) cover."""
    tot = 0.0
    i = max(0, bisect.bisect_right(starts, a) - 1)
    while i < len(merged) and merged[i][0] < b:
        tot += max(0.0, min(b, merged[i][1]) - max(a, merged[i][0]))
        i += 1
    return tot


def _cached_part(cache: dict, op: Op, share: float) -> Op:
    """``op`` moving ``share`` of its bytes (one FSDP unit's collective), one Op per (op, share)."""
    key = (id(op), share)
    part = cache.get(key)
    if part is None:
        part = cache[key] = dataclasses.replace(op, comm_bytes=op.comm_bytes * share, bytes=op.bytes * share)
    return part


def overlap_s(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Seconds during which some interval of ``a`` and some interval of ``b`` both run.

    >>> overlap_s([(0, 2), (1, 3)], [(2.5, 4), (0, 0.5)])
    1.0
    """
    ma, mb = _merged(a), _merged(b)
    i = j = 0
    tot = 0.0
    while i < len(ma) and j < len(mb):
        lo, hi = max(ma[i][0], mb[j][0]), min(ma[i][1], mb[j][1])
        tot += max(0.0, hi - lo)
        if ma[i][1] < mb[j][1]:
            i += 1
        else:
            j += 1
    return tot


def simulate(job: TrainingJob | WorkloadGraph, *, slow_rank: int | None = None, slowdown: float = 1.0,
             profile: HardwareProfile | None = None, baseline: bool = True) -> SimResult:
    """Replay one iteration of ``job`` (or of its built graph) as discrete events.

    ``slow_rank``: a GPU whose compute runs ``slowdown`` times slower (e.g. 1.1 for 10%); the result
    then carries ``baseline_step_time_s``, the same replay without it (unless ``baseline`` is False).

    >>> from clustertwin.predict import make_training_job
    >>> job = make_training_job("gpt3-125m", gpu="h100", num_gpus=8, plan="tp=2,pp=2,dp=2",
    ...                         micro_batch=1, global_batch=8, seq_len=1024)
    >>> r = simulate(job)
    >>> len(r.ranks), r.step_time_s > 0
    (2, True)
    """
    graph = job if isinstance(job, WorkloadGraph) else build_graph(job)
    job = graph.job
    plan = graph.plan
    dualpipe = runs_dualpipe(getattr(plan, "pp_schedule", None), graph.framework, plan.pp, plan.vpp)
    refuse_ep_overlap(graph.plan, graph.framework, "the discrete-event replay")
    n = job.cluster.num_gpus
    if slow_rank is not None:
        if not 0 <= slow_rank < n:
            raise PlanError("slow_rank", f"{slow_rank} is not a rank of this job", f"give a rank in 0..{n - 1}")
    if not (slowdown > 0 and slowdown < 1e6):
        raise PlanError("slowdown", f"{slowdown} is not a positive factor", "give e.g. 1.1 for a GPU 10% slower")
    pricer = Pricer(graph, profile or profile_for(job.cluster.gpu))
    rep = _Replay(graph, pricer, slow_rank, slowdown)
    if dualpipe:        # DeepSeek's DualPipe: each rank holds stages r and p-1-r (sim/dualpipe.py)
        build_dualpipe(rep)
    else:
        rep.build()
    step = rep.run()
    base = None
    if slow_rank is not None and baseline:
        base = simulate(graph, profile=profile).step_time_s
    return SimResult(job, graph, step, rep.ranks, slow_rank, slowdown, len(rep.e), base)


def fsdp_weight(s: Segment, op, fw) -> float:
    """A segment's share weight of a stage-wide FSDP op: its parameters in the op's group, save that
    the backward's re-gather and its copy-out skip the root unit (embedding and head: the segments
    of no layer), which FSDP2 keeps gathered from the forward (workload.graph.fsdp_units, fsdp_keeps_root)."""
    if fsdp_keeps_root(fw) and s.layer < 0 and op.phase == Phase.BWD and (op.collective == "all_gather"
                                                  or op.name.startswith("fsdp2.copy_out")):
        return 0.0
    return segment_weight(s, op.group)
