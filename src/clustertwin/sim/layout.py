"""What each virtual pipeline chunk holds (embedding, layers, head, in model order), the parameters of
each block (for the gradient buckets of data parallelism), and the buckets themselves.

Megatron-Core's DDP groups each model chunk's parameters into buckets of ``bucket_size`` elements in
backward order; a bucket's gradient reduction launches when the last of its gradients is computed in
the last micro-batch's backward (``overlap_grad_reduce``), and with ``overlap_param_gather`` the
forward of the next iteration waits, bucket by bucket, for the parameter all-gather. The bucket
size is the analytic model's (schedule/step.py), and each bucket's collective takes its share of the
stage's priced collective, so the buckets add up to exactly the op the graph holds.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..schedule.step import BUCKET_ELEMENTS
from ..specs import stage_layer_split
from ..workload.graph import Block, StageGraph, WorkloadGraph, layer_params_per_rank


@dataclass(frozen=True)
class Segment:
    """One block instance in a chunk: ``block`` names the graph's Block; ``layer`` is the global
    transformer layer index (-1 for embedding and head); params are this rank's elements per group."""

    block: str
    layer: int
    dense_params: float
    expert_params: float

    @property
    def label(self) -> str:
        return f"L{self.layer}" if self.layer >= 0 else self.block


@dataclass(frozen=True)
class Bucket:
    """A gradient bucket of one chunk: ``share`` of the stage's collective of ``group``; ``release`` is
    the index (forward order, within the chunk) of the segment whose backward completes it, ``first``
    the lowest segment index it covers (the forward that must wait for its parameter all-gather)."""

    group: str
    chunk: int
    share: float
    release: int
    first: int
    last: int


def chunk_segments(graph: WorkloadGraph) -> list[list[list[Segment]]]:
    """[stage][chunk] -> segments in forward order."""
    job, plan = graph.job, graph.plan
    model = job.model
    p, v = plan.pp, plan.vpp
    split = stage_layer_split(model.num_layers, p, v, plan.first_stage_layers, plan.last_stage_layers)
    starts = [0]
    for n in split:
        starts.append(starts[-1] + n)
    emb_params = model.vocab_size * model.hidden_size / plan.tp
    if model.positions == "learned":
        emb_params += model.max_seq_len * model.hidden_size
    out: list[list[list[Segment]]] = []
    for i, sg in enumerate(graph.stages):
        names = {b.name for b in sg.blocks}
        chunks: list[list[Segment]] = []
        layer_dense = 0.0
        for j in range(v):
            c = j * p + i
            segs: list[Segment] = []
            if i == 0 and j == 0 and "embedding" in names:
                segs.append(Segment("embedding", -1, emb_params, 0.0))
            for li in range(starts[c], starts[c + 1]):
                d, e = layer_params_per_rank(model, li, plan)
                layer_dense += d
                segs.append(Segment("moe_layer" if model.is_moe_layer(li) else "layer", li, d, e))
            if i == p - 1 and j == v - 1 and "head" in names:
                segs.append(Segment("head", -1, 0.0, 0.0))
            chunks.append(segs)
        # the head holds what the stage's parameters hold beyond its layers and embedding
        if i == p - 1 and "head" in names:
            total = sg.params.dense + sg.params.embedding
            head = max(0.0, total - layer_dense - (emb_params if i == 0 and "embedding" in names else 0.0))
            last = chunks[-1]
            last[-1] = Segment("head", -1, head, 0.0)
        out.append(chunks)
    return out


def block_of(sg: StageGraph, name: str) -> Block:
    for b in sg.blocks:
        if b.name == name:
            return b
    raise KeyError(name)


def make_buckets(chunks: list[list[Segment]], group: str, bucket_elements: float = BUCKET_ELEMENTS) -> list[Bucket]:
    """Buckets of one stage for ``group`` ("dp_cp": dense parameters, "edp": routed experts), per
    chunk in backward order; shares sum to 1 over the stage (empty when it holds none)."""
    def weight(s: Segment) -> float:
        return s.expert_params if group == "edp" else s.dense_params

    total = sum(weight(s) for segs in chunks for s in segs)
    if total <= 0:
        return []
    out: list[Bucket] = []
    for j, segs in enumerate(chunks):
        fill = 0.0
        hi = -1
        for idx in range(len(segs) - 1, -1, -1):
            w = weight(segs[idx])
            if w <= 0:
                continue
            if hi < 0:
                hi = idx
            while fill + w >= bucket_elements:
                take = bucket_elements - fill
                out.append(Bucket(group, j, (fill + take) / total, idx, idx, hi))
                w -= take
                fill = 0.0
                hi = idx
            fill += w
            if w == 0:
                hi = -1
        if fill > 0:
            low = min(i for i in range(len(segs)) if weight(segs[i]) > 0)
            out.append(Bucket(group, j, fill / total, low, low, hi))
    return out


@dataclass(frozen=True)
class StageDP:
    """The data-parallel work of one stage and how it overlaps (the plan's overlap options):
    ``gate``: this iteration's ZeRO parameter all-gathers run bucket by bucket under the first
    forward of each chunk (else after the optimizer); ``release``: gradient buckets reduce as the last
    backward of their chunk completes them (else after the whole backward). ``fsdp_ops``: FSDP's
    collectives per micro-batch; ``fsdp_copies``: FSDP2's copies on the compute stream per micro-batch
    (after each all-gather, before each reduce-scatter); ``step_copies``: those copies once per step
    (FSDP gathering and reducing once per step under pipeline parallelism)."""

    grad_ops: tuple
    gather_ops: tuple
    optimizer: object
    fsdp_ops: tuple
    buckets: dict
    gate: bool
    release: bool
    fsdp_copies: tuple = ()
    step_copies: tuple = ()

    @staticmethod
    def of(sg: StageGraph, chunks: list[list[Segment]], plan) -> "StageDP":
        from ..workload.ops import OpKind
        grad = tuple(op for op in sg.step_ops if op.kind == OpKind.COLLECTIVE and op.collective != "all_gather")
        gather = tuple(op for op in sg.step_ops if op.kind == OpKind.COLLECTIVE and op.collective == "all_gather")
        opt = next((op for op in sg.step_ops if op.kind == OpKind.OPTIMIZER), None)
        buckets = {op.name: make_buckets(chunks, op.group) for op in grad + gather}
        # (FSDP's once-per-step gathers, ``fsdp.*``: ZeRO-3, or ZeRO-2 as SHARD_GRAD_OP, under PP, are not buckets)
        gate = (plan.zero_stage in (1, 2) and bool(plan.overlap_param_gather) and bool(gather)
                and not any(op.name.startswith("fsdp.") for op in gather))
        release = bool(grad) and bool(plan.overlap_dp_comm)
        fsdp = tuple(op for op in sg.microbatch_dp_ops if op.is_comm)
        copies = tuple(op for op in sg.microbatch_dp_ops if not op.is_comm)
        step_copies = tuple(op for op in sg.step_ops if not op.is_comm and op.kind != OpKind.OPTIMIZER)
        return StageDP(grad, gather, opt, fsdp, buckets, gate, release, copies, step_copies)

    def copies(self, phase: str, copy_in: bool = False) -> tuple:
        """FSDP2's copies of a pass: the copy-outs after the all-gathers of ``phase`` ("fwd", "bwd",
        "step"), or (``copy_in``) the copy-ins before the reduce-scatters."""
        ops = self.step_copies if phase == "step" else self.fsdp_copies
        return tuple(op for op in ops if op.name.startswith("fsdp2.copy_in") == copy_in
                     and (copy_in or phase == "step" or op.phase.value == phase))

    def gather_order(self, chunks: int):
        """(op, chunk, bucket) of the parameter all-gathers in the order they are issued: chunk by
        chunk, in forward order of the layers they hold (dense and expert buckets interleaved)."""
        for j in range(chunks):
            items = [(b.first, b.last, g, op, b) for g, op in enumerate(self.gather_ops)
                     for b in self.buckets[op.name] if b.chunk == j]
            for *_, op, b in sorted(items, key=lambda x: (x[0], x[1], x[2])):
                yield op, j, b

    def grad_order(self, order: tuple[tuple[str, int, int], ...], chunks: int):
        """(op, chunk, bucket) of the gradient reductions in the order they launch: chunks by when their
        last backward runs, each in the order its backward completes the buckets (dense and expert
        buckets interleaved)."""
        last_b = {j: max(n for n, x in enumerate(order) if x[0] == "B" and x[1] == j) for j in range(chunks)}
        for j in sorted(range(chunks), key=last_b.__getitem__):
            items = [(-b.release, -b.last, g, k, op, b) for g, op in enumerate(self.grad_ops)
                     for k, b in enumerate(self.buckets[op.name]) if b.chunk == j]
            for *_, op, b in sorted(items, key=lambda x: x[:4]):
                yield op, j, b


def segment_weight(s: Segment, group: str) -> float:
    """A segment's parameters in the data-parallel group ``group`` (edp: routed experts)."""
    return s.expert_params if group == "edp" else s.dense_params
