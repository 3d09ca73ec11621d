"""The program of one block (a transformer layer, the embedding or the head) for one micro-batch on
one rank: its ops as steps on streams, with the dependencies that decide what overlaps. The
simulator replays these programs and the Chakra exporter writes them, so both carry the same
overlap semantics as the analytic step model (schedule/step.py):

- compute ops run in order on the compute stream;
- blocking collectives (TP without overlap, MoE all-to-all, embedding/head TP) sit between the op
  that produces their input and the op that consumes their output;
- with TP communication overlap (userbuffers), a TP collective next to a layer GEMM is split into
  tp chunks pipelined with the GEMM's chunks: an all-gather before the GEMM exposes its first chunk
  and runs the rest beside the GEMM; a reduce-scatter/all-reduce after the GEMM runs beside it and
  exposes its last chunk (exposed: 1/tp of the collective while the GEMM is the longer);
- the re-gather of the input for the wgrad GEMM (an overlappable TP all-gather) runs beside the
  dgrad GEMM of its section, and the wgrad waits for it;
- the CP ring exchange runs beside the attention kernel it feeds (exposed only beyond it), issued
  when the attention starts (what runs between, the ring's output merges and gradient
  accumulation, does not hide it: the analytic model hides it behind attention only); an exchange
  the ring waits for at its second step (``FIRST_STEP_CP``: torch's all-gather rotater) hides
  behind the first of the attention's ``attention_chunks`` steps only, the attention's other
  steps waiting for it; the last step's exchange (``LAST_STEP_CP``) starts after the attention
  and the compute stream waits for it;
- recomputation runs at the start of the layer's backward.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..workload.ops import Op, OpKind, Stream, is_score_gemm
from ..workload.transformer import LAST_STEP_CP

# CP exchanges waited for at the ring's second step (torch's all-gather rotater; schedule/step.py)
FIRST_STEP_CP = "attn.cp_allgather"

# elementwise ops of the unfused attention core (with the score GEMMs: what the CP ring hides behind)
_ATTN_ELEMENTWISE = ("attn.softmax", "attn.dropout")
HOST_IDLE = "host.idle"   # the step of a program that stands for the compute stream's wait for the host


@dataclass(frozen=True, slots=True)
class Step:
    """One op (or a part of one) of a block program.

    ``deps`` index earlier steps of the same program; a step without deps starts from the block's
    entry. ``fraction`` is the share of the op's priced time this step carries (1 unless a TP
    collective was split into the chunk it exposes and the chunks it overlaps with its GEMM, ``part``
    "exposed" / "overlapped").
    """

    op: Op
    stream: Stream
    duration_s: float
    latency_s: float
    deps: tuple[int, ...]
    fraction: float = 1.0
    part: str = ""

    @property
    def is_comm(self) -> bool:
        return self.op.is_comm


@dataclass(frozen=True)
class Program:
    steps: tuple[Step, ...]
    exits: tuple[int, ...]          # steps the next block waits for

    @property
    def compute_s(self) -> float:
        """Seconds of the block's kernels on the compute stream (not its wait for the host)."""
        return sum(s.duration_s for s in self.steps if not s.is_comm and s.op.name != HOST_IDLE)


def _is_attn_core(op: Op) -> bool:
    """The attention core: the fused kernel, or the score GEMMs, softmax and dropout of unfused attention
    (the analytic model's attention time for the CP ring is the kernels named attn.qk*/attn.av*)."""
    return op.kind == OpKind.ATTENTION or _is_score_gemm(op.name) or op.name.startswith(_ATTN_ELEMENTWISE)


_is_score_gemm = is_score_gemm


def _tp_overlap_gemm(op: Op) -> bool:
    """Layer GEMMs that userbuffers splits into tp chunks: the projections of attention and MLP (not
    the attention-score GEMMs, not the MoE experts, not the LM head)."""
    return (op.kind == OpKind.GEMM and op.layer in ("layer", "moe_layer")
            and not _is_score_gemm(op.name) and not op.name.startswith("moe."))


def comm_latency(pricer, op: Op) -> float:
    """The latency part of a collective's priced time (the rest moves bytes over links)."""
    pl = pricer.groups.get(op.group)
    if pl is None or pl.size <= 1 or op.comm_bytes <= 0:
        return 0.0
    return min(pricer.time(op), pricer.network.latency(pl, op.collective))


def build_program(ops: tuple[Op, ...] | list[Op], pricer, tp: int, overlap_tp: bool,
                  host_idle_s: float = 0.0) -> Program:
    """The program of ``ops`` (one block, one phase, recomputation first for a backward).
    ``host_idle_s``: the time the compute stream waits for the host over the block (the analytic
    model's ``phase_host_idle``), replayed as one wait on the compute stream at the block's end."""
    ops = list(ops)
    n = len(ops)
    # the overlappable TP all-gather (re-gather for wgrad) moves to the dgrad GEMM before it
    early: dict[int, list[int]] = {}
    wgrad_waits: dict[int, list[int]] = {}
    order: list[int] = []
    for i, op in enumerate(ops):
        if op.is_comm and op.group == "tp" and op.overlappable:
            j = next((k for k in range(i - 1, -1, -1) if ops[k].kind == OpKind.GEMM and ops[k].name.endswith(".dgrad")),
                     None)
            if j is not None:
                early.setdefault(j, []).append(i)
                if j + 1 < n and ops[j + 1].name.endswith(".wgrad"):
                    wgrad_waits.setdefault(j + 1, []).append(i)
                continue
        order.append(i)

    steps: list[Step] = []
    issued: dict[int, int] = {}        # op index -> step of an early-issued comm op
    frontier: list[int] = []           # steps the next compute op depends on
    join_after_gemm: list[int] = []    # overlapped TP part "b" the op after the paired GEMM waits for
    pending_gemm = -1                  # op index of the GEMM an "enter" collective is paired with
    ring: list[int] = []               # CP ring steps running beside the attention core
    deferred: list[int] = []           # op indices of CP exchanges issued when the attention starts
    last_op = -1                       # op index of the last step added for a compute op

    def add(op: Op, deps: list[int], fraction: float = 1.0, part: str = "") -> int:
        t = pricer.time(op)
        lat = comm_latency(pricer, op) if op.is_comm else 0.0
        steps.append(Step(op, op.stream, t * fraction, lat * fraction, tuple(sorted(set(deps))), fraction, part))
        return len(steps) - 1

    for pos, k in enumerate(order):
        op = ops[k]
        if not op.is_comm:
            for e in early.get(k, ()):  # issued with the dgrad, beside it
                issued[e] = add(ops[e], frontier)
            deps = list(frontier) + [issued[e] for e in wgrad_waits.get(k, ()) if e in issued]
            if ring and not _is_attn_core(op):
                deps += ring
                ring = []
            if deferred and _is_attn_core(op):
                # the ring's exchanges start with the attention they run beside
                first = [add(ops[x], frontier) for x in deferred if ops[x].name.startswith(FIRST_STEP_CP)]
                ring += [add(ops[x], frontier) for x in deferred
                         if not ops[x].name.startswith(FIRST_STEP_CP) and ops[x].name != LAST_STEP_CP]
                last = [x for x in deferred if ops[x].name == LAST_STEP_CP]
                deferred = []
                chunks = max(1, int(getattr(getattr(pricer, "compute", None), "attention_chunks", 1)))
                if first and op.kind == OpKind.ATTENTION and chunks > 1:
                    # the first ring step computes on the local K/V; the others wait for the gathered ones
                    a = add(op, deps, 1 / chunks, "first_step")
                    s = add(op, [a] + first, (chunks - 1) / chunks, "ring_steps")
                else:
                    s = add(op, deps + first)
                # the last step's exchange follows the attention; the next op waits for it with the ring
                ring += [add(ops[x], [s]) for x in last]
                frontier = [s]
                last_op = k
                continue
            s = add(op, deps)
            frontier = [s]
            last_op = k
            if pending_gemm == k:
                frontier += join_after_gemm
                join_after_gemm, pending_gemm = [], -1
            continue
        if op.group == "cp" and op.overlappable and any(_is_attn_core(ops[x]) for x in order[pos + 1:]):
            deferred.append(k)                  # beside the attention core ahead; joined after it
            continue
        if op.group == "tp" and overlap_tp and tp > 1 and not op.overlappable:
            prev_k = order[pos - 1] if pos else -1
            if prev_k >= 0 and prev_k == last_op and _tp_overlap_gemm(ops[prev_k]) and frontier == [len(steps) - 1]:
                # exit: beside the GEMM that produced the input, its last chunk exposed after it
                g = len(steps) - 1
                a = add(op, list(steps[g].deps), (tp - 1) / tp, "overlapped")
                b = add(op, [a, g], 1 / tp, "exposed")
                frontier = [b]
                continue
            gemm_k = next((x for x in order[pos + 1:] if ops[x].is_comm or ops[x].kind == OpKind.GEMM), -1)
            if gemm_k >= 0 and not ops[gemm_k].is_comm and _tp_overlap_gemm(ops[gemm_k]):
                # enter: the first chunk exposed, the rest beside the GEMM that consumes it
                a = add(op, frontier, 1 / tp, "exposed")
                b = add(op, [a], (tp - 1) / tp, "overlapped")
                frontier = [a]
                join_after_gemm, pending_gemm = [b], gemm_k
                continue
        s = add(op, frontier)
        frontier = [s]
    exits = list(frontier) + ring + join_after_gemm
    dependents = {d for s in steps for d in s.deps}
    exits += [i for i in range(len(steps)) if i not in dependents and i not in exits]
    if host_idle_s > 0 and ops:
        # the host's issue time the GPU could not hide (a dropless MoE layer's read-back of its token
        # counts, a host-bound stack): the compute stream idles that long before the next block
        wait = Op(HOST_IDLE, OpKind.ELEMENTWISE, ops[-1].phase, layer=ops[-1].layer, kernels=0)
        steps.append(Step(wait, Stream.COMPUTE, host_idle_s, 0.0, tuple(sorted(set(exits)))))
        exits = [len(steps) - 1]
    return Program(tuple(steps), tuple(sorted(set(exits))))
