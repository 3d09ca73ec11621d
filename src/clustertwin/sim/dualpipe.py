"""DualPipe replayed as discrete events (DeepSeek-V3 Technical Report, arXiv 2412.19437, Sec. 3.2.1).

A pipeline of p ranks (p even) over p stages, each rank holding two of them: stage r for the
micro-batches that enter at rank 0 (direction 0) and stage p-1-r for those that enter at rank p-1
(direction 1), half of the micro-batches each way. Each rank runs the order of DeepSeek's reference
implementation (github.com/deepseek-ai/DualPipe, dualpipe.py ``DualPipe.step``: eight steps, with
h micro-batches per direction, H = p/2, x = min(r, p-1-r); "direction 0" is the rank's own: the
direction entering at rank 0 on the first half of the ranks, the reverse one on the second half):

1. 2(H-x-1) forwards of direction 0;
2. x+1 times: a forward of direction 0, a forward of direction 1;
3. H-x-1 times: a backward of direction 1 with its weight gradients deferred (zero bubble), the
   deferred weight gradients (W), a forward of direction 1;
4. h-p+x+1 times: an overlapped pair (forward 0, backward 1), an overlapped pair (forward 1,
   backward 0); the first pair of the middle ranks runs its two chunks one after the other;
5. H-x-1 times: a backward of direction 1, a pair (forward 1, backward 0);
6. x+1 times: a backward of direction 1, a backward of direction 0 (the second half with W deferred);
7. H-x-1 times: a W, a backward of direction 0 with W deferred;
8. x+1 W.

An overlapped pair (the report's Figure 4) runs the two chunks' layers interleaved on the compute
stream (the forward's attention, the backward's MLP, ...), each layer's all-to-all dispatch and
combine on a communication stream, so they hide behind the other chunk's compute; they take
``DUALPIPE_COMM_SMS`` of the GPU's SMs (Sec. 3.2.2: 20 of 132), which slows the compute beside them
by that share for as long as they run. Unpaired chunks expose their all-to-alls. Each layer's
timeline (compute runs between its all-to-alls) comes from the replay of its block program.

Sends are asynchronous (each direction on its own stream); a chunk waits for the activation or
gradient it receives. Gradient reduction of each stage starts after its last backward and weight
gradients; the optimizer follows both stages' reductions; ZeRO's parameter all-gathers run under the
first forwards (overlap_param_gather) or after the optimizer.

Scope: one rank per stage pair (no slow GPU), no FSDP, no interleaving (DualPipe has none).
"""
from __future__ import annotations

from ..errors import PlanError
from ..schedule.step import DUALPIPE_COMM_SMS
from .layout import StageDP


def dualpipe_order(p: int, r: int, h: int) -> list[tuple]:
    """The order of rank ``r`` of ``p`` with ``h`` micro-batches per direction: items ("F", d),
    ("B", d, zb), ("FB", d_f, d_b) (an overlapped pair), ("W",) (the oldest deferred weight gradients).

    >>> [x[0] for x in dualpipe_order(2, 0, 2)]
    ['F', 'F', 'F', 'B', 'FB', 'B', 'B', 'W']
    """
    half = p // 2
    x = min(r, p - 1 - r)
    middle = x == half - 1
    out: list[tuple] = []
    out += [("F", 0)] * (2 * (half - x - 1))
    for _ in range(x + 1):
        out += [("F", 0), ("F", 1)]
    for _ in range(half - x - 1):
        out += [("B", 1, True), ("W",), ("F", 1)]
    for i in range(h - p + x + 1):
        if i == 0 and middle:
            out += [("F", 0), ("B", 1, False)]
        else:
            out.append(("FB", 0, 1))
        out.append(("FB", 1, 0))
    for _ in range(half - x - 1):
        out += [("B", 1, False), ("FB", 1, 0)]
    zb = False
    n6 = x + 1
    for i in range(n6):
        if i == n6 // 2 and x % 2 == 1:
            zb = True
        out.append(("B", 1, zb))
        if i == n6 // 2 and x % 2 == 0:
            zb = True
        out.append(("B", 0, zb))
    for _ in range(half - x - 1):
        out += [("W",), ("B", 0, True)]
    out += [("W",)] * (x + 1)
    if r >= half:       # the second half of the ranks calls the reverse direction its phase 0
        flip = {"F": lambda it: ("F", 1 - it[1]), "B": lambda it: ("B", 1 - it[1], it[2]),
                "FB": lambda it: ("FB", 1 - it[1], 1 - it[2]), "W": lambda it: it}
        out = [flip[it[0]](it) for it in out]
    return out


def _mlp_boundary(name: str) -> bool:
    """The op where a layer's forward turns from attention to its MLP (norm2), or its backward from the
    MLP to attention (attn.residual.bwd)."""
    return name in ("norm2", "attn.residual.bwd")


def layer_timeline(mp) -> tuple[list[tuple[str, float]], float]:
    """A block's replayed program as the pieces a DualPipe pair interleaves: ("c", s) compute runs,
    cut at its expert-parallel all-to-alls (("a", s)) and at its attention/MLP boundary (the report's
    Figure 4 splits each chunk into attention, dispatch, MLP, combine), and its weight-gradient GEMM
    seconds. A compute run is the time between cuts (what the block computes, with whatever else it
    exposes)."""
    prog = mp.program
    ev = sorted(mp.events[0], key=lambda x: (x[1], x[2]))
    cuts = [(a, b) for k, a, b in ev if prog.steps[k].is_comm and prog.steps[k].op.group == "ep"]
    marks = [a for k, a, _ in ev if not prog.steps[k].is_comm and _mlp_boundary(prog.steps[k].op.name)]
    out: list[tuple[str, float]] = []
    t = 0.0
    points = sorted([(a, b) for a, b in _merged(cuts)] + [(a, a) for a in marks])
    for a, b in points:
        if a < t:
            continue
        out.append(("c", a - t))
        if b > a:
            out.append(("a", b - a))
        t = b
    out.append(("c", max(0.0, mp.duration_s - t)))
    out = [x for x in out if x[0] == "a" or x[1] > 0] or [("c", 0.0)]
    w = sum(st.duration_s * mp.factors[0] for st in prog.steps if not st.is_comm and st.op.name.endswith(".wgrad"))
    return out, w


def _merged(iv):
    out = []
    for x, y in sorted(iv):
        if out and x <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], y))
        else:
            out.append((x, y))
    return out


def build_dualpipe(rep) -> None:
    """Add DualPipe's iteration to ``rep`` (a sim.replay._Replay with one rank per stage)."""
    from .replay import MacroTask
    from .program import comm_latency
    e, p, m, plan, pricer = rep.e, rep.p, rep.m, rep.plan, rep.pricer
    if rep.slow_rank is not None:
        raise PlanError("slow_rank", "the DualPipe replay runs healthy GPUs only", "leave out --slow-rank")
    if plan.zero_stage >= 3 or any(sg.microbatch_dp_ops for sg in rep.graph.stages):
        raise PlanError("plan.zero", "the DualPipe replay does not replay FSDP", "set zero=1 or zero=2")
    if m % 2 or m < 2 * p:
        raise PlanError("global_batch", f"DualPipe needs an even number of micro-batches, at least 2 x pp = {2 * p} "
                        f"(this plan has {m})", "raise the global batch or lower the pipeline depth")
    h = m // 2
    # the framework's host time per micro-batch and stage outside the layers (get_batch, the schedule's
    # Python: FrameworkProfile.microbatch_overhead_s, the analytic model's "other"), a wait of the
    # compute stream before each forward chunk
    host_s = rep.graph.framework.microbatch_overhead_s
    s_comm = DUALPIPE_COMM_SMS / rep.graph.job.cluster.gpu.sm_count
    ranks = rep.ranks
    stage_of = {(r, 0): r for r in range(p)} | {(r, 1): p - 1 - r for r in range(p)}
    for r in range(p):      # the labels (sim's table, Perfetto's process names) show both stages
        ranks[r].stages = tuple(sorted({r, p - 1 - r}))

    layers: dict[tuple, list] = {}

    def chunk_layers(stage: int, ph: str):
        """Per layer of the stage's pass (in execution order): (segment, profile, pieces, W seconds)."""
        key = (stage, ph)
        if key not in layers:
            segs = rep.segments[stage][0]
            segs = segs if ph == "F" else segs[::-1]
            out = []
            for s in segs:
                mp = rep.profile(stage, s.block, ph, (1.0,))
                out.append((s, mp, *layer_timeline(mp)))   # (segment, profile, pieces, W seconds)
            layers[key] = out
        return layers[key]

    # pipeline sends: (direction, phase, receiving rank, micro-batch) -> transfer
    sends: dict[tuple, int] = {}
    recv_waits: list[tuple[int, tuple]] = []
    last: dict[int, int | None] = {r: None for r in range(p)}
    counter = {(r, ph, d): 0 for r in range(p) for ph in "FB" for d in (0, 1)}
    link_kind = rep._link_kind("pp")

    def dest(r: int, ph: str, d: int) -> int | None:
        step = 1 if (ph == "F") == (d == 0) else -1
        q = r + step
        return q if 0 <= q < p else None

    def receives(r: int, ph: str, d: int) -> bool:
        if ph == "F":
            return r != (0 if d == 0 else p - 1)
        return r != (p - 1 if d == 0 else 0)

    def send(r: int, ph: str, d: int, k: int, after: int) -> None:
        q = dest(r, ph, d)
        if q is None:
            return
        stage = stage_of[(r, d)]
        what = "activation" if ph == "F" else "gradient"
        op = {o.name: o for o in rep.graph.stages[stage].p2p}[f"pp.{what}.chunk0"]
        t, lat = pricer.time(op), comm_latency(pricer, op)
        links = (e.link(r, link_kind, "tx"), e.link(q, link_kind, "rx"))
        sid = e.add((e.stream(r, f"pp_comm{d}"),), t - lat, (after,), lat, links)
        rep._add(ranks[r], MacroTask("pp_comm", f"send {what} d{d}.{k}", 0, 0, (), d, k, ph, op=op, peer=q), sid)
        sends[(d, ph, q, k)] = sid

    def compute(r: int, dur: float, deps, name: str, d: int, k: int, ph: str, segs=()) -> int:
        tid = e.add((e.stream(r, "compute"),), dur, [x for x in deps if x is not None])
        rep._add(ranks[r], MacroTask("compute", name, 0, 0, segs, d, k, ph), tid)
        last[r] = tid
        return tid

    deferred: dict[int, list[tuple]] = {r: [] for r in range(p)}

    def chain(r: int, ph: str, d: int, zb: bool):
        """A chunk's layers as (segment, profile, pieces) plus its deferred W seconds."""
        stage = stage_of[(r, d)]
        k = counter[(r, ph, d)]
        counter[(r, ph, d)] += 1
        items, w_total = [], 0.0
        for s, mp, pieces, w in chunk_layers(stage, ph):
            if zb and w > 0:   # the wgrad GEMMs deferred to W: taken from the layer's compute, last pieces first
                pieces, left = list(pieces), w
                for n in range(len(pieces) - 1, -1, -1):
                    if pieces[n][0] == "c" and left > 0:
                        cut = min(left, pieces[n][1])
                        pieces[n] = ("c", pieces[n][1] - cut)
                        left -= cut
                w_total += w
            items.append((s, mp, pieces))
        return stage, k, items, w_total

    release: dict[tuple[int, int, int], int] = {}     # (rank, stage, segment) -> its latest gradient task
    gate_task: dict[tuple[int, int, int], int] = {}   # (rank, stage, segment) -> the all-gather it waits for

    def single(r: int, ph: str, d: int, zb: bool = False) -> None:
        """A chunk alone, layer by layer, its all-to-alls exposed."""
        stage, k, items, w = chain(r, ph, d, zb)
        n = len(items)
        first = None
        if ph == "F" and host_s > 0:
            first = compute(r, host_s, [], f"F{d}.{k} host", d, k, ph)
        ws = []
        for q, (s, mp, pieces) in enumerate(items):
            si = q if ph == "F" else n - 1 - q
            gate = gate_task.get((r, stage, si)) if ph == "F" else None
            # the timeline shows its ops where the task is the whole replayed block (not with W deferred)
            segs = () if zb else ((s, ph, mp),)
            tid = compute(r, sum(x[1] for x in pieces), [gate], f"{ph}{d}.{k} {s.label}", d, k, ph, segs)
            if first is None:
                first = tid
            if ph == "B":
                if zb:
                    ws.append((s, si, layer_timeline(mp)[1]))
                else:
                    release[(r, stage, si)] = tid
        if receives(r, ph, d):
            recv_waits.append((first, (d, ph, r, k)))
        if zb:
            deferred[r].append((stage, ws, d, k))
        send(r, ph, d, k, last[r])

    def weights(r: int) -> None:
        """The oldest deferred weight-gradient GEMMs (DualPipe's W), layer by layer."""
        stage, ws, d, k = deferred[r].pop(0)
        for s, si, w in ws:
            release[(r, stage, si)] = compute(r, w, [], f"W{d}.{k} {s.label}", d, k, "B")

    def pair(r: int, df: int, db: int) -> None:
        """Forward of direction ``df`` and backward of direction ``db`` overlapped (Figure 4)."""
        sf, kf, fl, _ = chain(r, "F", df, False)
        sb, kb, bl, _ = chain(r, "B", db, False)
        if host_s > 0:
            compute(r, host_s, [], f"F{df}.{kf} host", df, kf, "F")
        comm = e.stream(r, "ep_comm")
        def steps(items):
            return [x for _, _, pieces in items for x in pieces]
        xs, ys = steps(fl), steps(bl)
        prev = {0: last[r], 1: last[r]}
        recv_first = {0: receives(r, "F", df), 1: receives(r, "B", db)}
        first_task: dict[int, int] = {}
        pending_slow = {0: 0.0, 1: 0.0}     # SMs the other chain's all-to-all takes from this chain's next run
        # the order the two chains' pieces are issued in: a list schedule on their durations (the
        # piece whose inputs are ready first, ties to the chain with more compute left), so each
        # chain's all-to-alls run beside the other's compute (DeepSeek writes this interleave per model:
        # overlapped_forward_backward; Figure 4 shows V3's)
        seqs = {0: xs, 1: ys}
        ix = {0: 0, 1: 0}
        ready = {0: 0.0, 1: 0.0}
        left = {c: sum(t for kind, t in seqs[c] if kind == "c") for c in (0, 1)}
        t_comp = t_comm = 0.0
        while ix[0] < len(xs) or ix[1] < len(ys):
            open_ = [c for c in (0, 1) if ix[c] < len(seqs[c])]
            c = min(open_, key=lambda c: (max(ready[c], t_comp), -left[c]))
            ph, d, k = ("F", df, kf) if c == 0 else ("B", db, kb)
            issued_compute = False
            while ix[c] < len(seqs[c]):
                kind, t = seqs[c][ix[c]]
                if kind == "c" and issued_compute:
                    break
                ix[c] += 1
                if kind == "c":
                    issued_compute = True
                    dur = t + pending_slow[c]
                    pending_slow[c] = 0.0
                    t_comp = ready[c] = max(ready[c], t_comp) + dur
                    left[c] -= t
                    tid = e.add((e.stream(r, "compute"),), dur, [x for x in (prev[c],) if x is not None])
                    rep._add(ranks[r], MacroTask("compute", f"{ph}{d}.{k} pair", 0, 0, (), d, k, ph), tid)
                else:
                    t_comm = ready[c] = max(ready[c], t_comm) + t
                    tid = e.add((comm,), t, [x for x in (prev[c],) if x is not None])
                    rep._add(ranks[r], MacroTask("ep_comm", f"{ph}{d}.{k} a2a", 0, 0, (), d, k, ph), tid)
                    pending_slow[1 - c] += s_comm * t
                if c not in first_task:
                    first_task[c] = tid
                    if recv_first[c]:
                        recv_waits.append((tid, (d, ph, r, k)))
                prev[c] = tid
        # the chains' ends: the last compute of each (a trailing all-to-all ends the forward chain)
        send(r, "F", df, kf, prev[0])
        send(r, "B", db, kb, prev[1])
        last[r] = e.add((e.stream(r, "compute"),), 0.0, [prev[0], prev[1]])
        rep._add(ranks[r], MacroTask("compute", f"F{df}.{kf}+B{db}.{kb} end", 0, 0, (), df, kf, "F"), last[r])

    # this iteration's ZeRO parameter all-gathers (overlap_param_gather), issued first on the DP stream and
    # waited for at each stage's first forward
    dps = {stage: StageDP.of(rep.graph.stages[stage], rep.segments[stage], plan) for stage in range(p)}
    for r in range(p):
        for stage in sorted({stage_of[(r, 0)], stage_of[(r, 1)]}):
            if dps[stage].gate:
                for op, _, b in dps[stage].gather_order(1):
                    tid = rep._collective([ranks[r]], op, b.share, (), f"{op.name} s{stage}")
                    for si in range(b.first, b.last + 1):
                        gate_task[(r, stage, si)] = tid      # FIFO: the last one issued covers the earlier
    for r in range(p):
        for item in dualpipe_order(p, r, h):
            if item[0] == "F":
                single(r, "F", item[1])
            elif item[0] == "B":
                single(r, "B", item[1], item[2])
            elif item[0] == "FB":
                pair(r, item[1], item[2])
            else:
                weights(r)
    for tid, key in recv_waits:
        src = sends.get(key)
        if src is None:  # pragma: no cover - every order feeds its receives
            raise RuntimeError(f"no pipeline send feeds {key}")
        e.depend(tid, src)
    # once per step: each stage's gradient buckets reduce as its last backward (or W) completes them,
    # then the optimizer of both stages, then (without overlap_param_gather) the parameter all-gathers
    for r in range(p):
        grads, gathers, opt_s = [], [], 0.0
        stages = sorted({stage_of[(r, 0)], stage_of[(r, 1)]})
        done = sorted(((max(release[(r, st, si)] for si in range(len(rep.segments[st][0]))), st) for st in stages))
        for _, stage in done:           # in the order the stages finish
            dpw = dps[stage]
            for op, _, b in dpw.grad_order((("B", 0, 0),), 1):
                deps = [release[(r, stage, b.release)]] if dpw.release else [last[r]]
                grads.append(rep._collective([ranks[r]], op, b.share, deps, f"{op.name} s{stage}"))
            if dpw.optimizer is not None:
                opt_s += pricer.time(dpw.optimizer)
            if not dpw.gate:
                gathers += [(op, stage) for op in dpw.gather_ops]
        opt = compute(r, opt_s, grads + [last[r]], "optimizer.adam", -1, -1, "step")
        for op, stage in gathers:
            rep._collective([ranks[r]], op, 1.0, [opt], f"{op.name} s{stage}")
