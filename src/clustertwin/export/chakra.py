"""Chakra execution traces of one iteration: one file per rank, ``DIR/<name>.<rank>.et``, in the
MLCommons Chakra schema (``mlc-chakra``, the ``[chakra]`` extra), for ASTRA-sim to replay.

What each rank's trace holds, in the order the rank runs it (Megatron's 1F1B / interleaved 1F1B, or
DeepSeek's DualPipe, where rank r runs stages r and p-1-r: ``_dualpipe_templates``):
- compute nodes (COMP_NODE): the ops of a block merged along chains, as ASTRA-sim wants no
  sub-microsecond kernels; each carries its duration (the Pricer's, in whole microseconds, rounded
  so the rank's total stays exact), FLOPs (``num_ops``) and bytes moved (``tensor_size``);
- collective nodes (COMM_COLL_NODE): TP/CP/EP collectives inside the layers, gradient buckets and
  ZeRO parameter all-gathers, with ``comm_type``, ``comm_size`` (bytes, in ASTRA-sim's meaning:
  all-gather = each rank's input) and ``pg_name`` (an integer id listed in ``<name>.groups.json``);
  the CP ring exchange is written as the all-gather of K/V it amounts to;
- pipeline sends and receives (COMM_SEND_NODE / COMM_RECV_NODE) with ``comm_src``, ``comm_dst``,
  ``comm_tag`` and ``comm_size``;
- dependencies: all ordering in ``data_deps`` (what ASTRA-sim's v1 feeder reads); edges that only
  order a stream (gradient buckets one after another) also in ``ctrl_deps``. Overlaps follow the
  same block programs as ``clustertwin sim`` (sim/program.py).

Ranks of one pipeline stage run the same program and differ only in their groups and pipeline peers,
so each stage's trace is built and serialized once; a rank's file is that template with its group
ids and peer ranks spliced in (the serialized fields are appended attributes). Those fields are
absolute rank and group numbers, so no two ranks' files are identical (hard links cannot share
them); above COMPACT_THRESHOLD ranks the export writes the templates themselves (the compact
layout) and ``expand`` writes any rank's file from them.

For ASTRA-sim (docs/trace.md): compute nodes carry ``num_ops``/``tensor_size`` that its roofline
turns into their priced duration (``Roofline``); an overlapped TP collective is one whole
collective beside its GEMM plus a wait on the compute stream for its exposed chunk; gradient
buckets are issued when their backward pass ends; ``export/astra.py`` writes the network, system
and remote-memory files and the README with the command.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..calibrate.profile import profile_for
from ..errors import ClusterTwinError, DataError
from ..errors import PlanError
from ..schedule.step import DUALPIPE_COMM_SMS, Pricer, refuse_ep_overlap, runs_dualpipe
from ..sim.dualpipe import dualpipe_order
from ..sim.layout import Segment, StageDP, block_of, chunk_segments, segment_weight
from ..sim.program import Program, build_program
from ..sim.schedule import next_virtual, stage_order
from ..workload.graph import WorkloadGraph
from ..workload.ops import Op

SCHEMA_VERSION = "0.0.4"
GROUP_KINDS = ("tp", "cp", "dp_cp", "ep", "edp")


class ChakraUnavailable(ClusterTwinError):
    """The optional Chakra package is not installed."""


def _pb():
    try:
        from chakra.schema.protobuf import et_def_pb2 as pb
    except ImportError:
        raise ChakraUnavailable("format", "Chakra traces need the mlc-chakra package",
                                "install clustertwin with the [chakra] extra: pip install 'clustertwin[chakra]'"
                                ) from None
    return pb


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _record(payload: bytes) -> bytes:
    """A length-delimited message, as protolib.encodeMessage writes it."""
    return _varint(len(payload)) + payload


# ---- rank layout and process groups ---------------------------------------------------------------
@dataclass(frozen=True)
class RankLayout:
    """Megatron rank order: tp innermost, then cp, dp, pp; ep and edp are carved out of dp x cp."""

    tp: int
    cp: int
    dp: int
    pp: int
    ep: int

    @property
    def world(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    @property
    def stage_stride(self) -> int:
        return self.tp * self.cp * self.dp

    def coords(self, r: int) -> tuple[int, int, int, int]:
        return r % self.tp, (r // self.tp) % self.cp, (r // (self.tp * self.cp)) % self.dp, r // self.stage_stride

    def sizes(self) -> dict[str, int]:
        return {"tp": self.tp, "cp": self.cp, "dp_cp": self.dp * self.cp, "ep": self.ep,
                "edp": max(1, self.dp * self.cp // self.ep)}

    def group_index(self, kind: str, r: int) -> int:
        """Index of rank r's group of ``kind`` among the groups of that kind."""
        t, c, d, s = self.coords(r)
        x = d * self.cp + c                       # position in the dp x cp group (cp innermost)
        if kind == "tp":
            return r // self.tp
        if kind == "cp":
            return (s * self.dp + d) * self.tp + t
        if kind == "dp_cp":
            return s * self.tp + t
        if kind == "ep":
            return (s * self.tp + t) * (self.dp * self.cp // self.ep) + x // self.ep
        if kind == "edp":
            return (s * self.tp + t) * self.ep + x % self.ep
        raise KeyError(kind)

    def num_groups(self, kind: str) -> int:
        return self.world // self.sizes()[kind]


class GroupIds:
    """Integer ids of every process group used (size > 1), all of the same number of digits, so a
    rank's trace differs from its stage template by fields of fixed length."""

    def __init__(self, layout: RankLayout, kinds: list[str]):
        self.layout = layout
        self.kinds = [k for k in kinds if layout.sizes()[k] > 1]
        total = sum(layout.num_groups(k) for k in self.kinds)
        self.base = 10 ** len(str(max(total, 1)))
        self.offset: dict[str, int] = {}
        n = 0
        for k in self.kinds:
            self.offset[k] = n
            n += layout.num_groups(k)

    def id(self, kind: str, r: int) -> int:
        return self.base + self.offset[kind] + self.layout.group_index(kind, r)

    def table(self) -> dict[str, list[int]]:
        out: dict[int, list[int]] = {}
        for r in range(self.layout.world):
            for k in self.kinds:
                out.setdefault(self.id(k, r), []).append(r)
        return {str(g): ranks for g, ranks in sorted(out.items())}


# ---- the roofline of the emitted system file ----------------------------------------------------
@dataclass(frozen=True)
class Roofline:
    """ASTRA-sim's roofline (astra-sim ``system/Roofline.cc``, ``workload/Workload.cc`` issue_comp): a
    compute node of ``num_ops`` operations moving ``tensor_size`` bytes takes
    num_ops / min(bandwidth x num_ops / tensor_size, peak) = max(num_ops / peak, tensor_size / bandwidth).

    ``peak`` (FLOP/s) and ``bandwidth`` (B/s) are what the system file says (``peak-perf`` in TFLOPS,
    ``local-mem-bw`` in GB/s of 1e9 bytes): the GPU's dense peak at the job's precision and its HBM
    bandwidth."""

    peak: float
    bandwidth: float

    def attributes(self, flops: float, nbytes: float, seconds: float) -> tuple[int, int]:
        """(num_ops, tensor_size) of a node that moves ``nbytes``, does ``flops`` and is priced at
        ``seconds``, chosen so that the roofline above takes exactly ``seconds``.

        The side that binds at the roofline keeps its meaning scaled by the node's priced efficiency:
        a compute-bound node (flops / peak >= bytes / bandwidth) carries num_ops = seconds x peak (its
        FLOPs over its efficiency) and its bytes; a memory-bound one carries tensor_size = seconds x
        bandwidth (its bytes over its efficiency) and its FLOPs. A node the graph gives no FLOPs
        (embedding lookup, residual add, unpermute, embedding gradient) counts one operation per
        16-bit element it moves, so num_ops > 0 everywhere: a node with num_ops 0 makes ASTRA-sim's
        roofline divide 0 by 0."""
        peak, bw = self.peak, self.bandwidth
        if seconds <= 0:
            return 1, 1
        if flops <= 0:
            flops = nbytes / 2
        if flops * bw >= nbytes * peak:                      # compute-bound at the roofline
            return max(1, round(seconds * peak)), max(1, min(int(nbytes), int(seconds * bw)))
        return max(1, min(int(flops), int(seconds * peak))), max(1, round(seconds * bw))

    def seconds(self, num_ops: int, tensor_size: int) -> float:
        """What ASTRA-sim's roofline makes of a node's attributes."""
        return num_ops / min(self.bandwidth * num_ops / tensor_size, self.peak)

    @classmethod
    def of(cls, graph: WorkloadGraph) -> "Roofline":
        gpu = graph.job.cluster.gpu
        return cls(peak=gpu.peak(graph.plan.precision), bandwidth=gpu.hbm_bandwidth_bytes_per_s)


# ---- stage templates ---------------------------------------------------------------------------
@dataclass
class _Node:
    id: int
    name: str
    type: int
    deps: list[int]
    ctrl: list[int] = field(default_factory=list)
    duration_us: int = 0
    duration_s: float = 0.0   # unrounded, for the roofline attributes
    flops: int = 0
    tensor_bytes: int = 0
    comm_type: int = -1
    comm_size: int = 0
    tag: int = -1
    hole: str = ""            # per-rank fields: "pg:<kind>" or "<send|recv>:<fwd|bwd>"
    merged: int = 0           # further blocks' compute merged into this node


@dataclass
class _Fragment:
    """A block program as Chakra nodes: compute steps merged along chains."""

    nodes: list[tuple[str, list[int], list[int], bool]]   # (kind "comp"/"comm", steps, frag deps, entry)
    exits: list[int]


def _fragment(prog: Program) -> _Fragment:
    dependents = [0] * len(prog.steps)
    for st in prog.steps:
        for d in st.deps:
            dependents[d] += 1
    nodes: list[tuple[str, list[int], list[int], bool]] = []
    node_of: list[int] = []
    for k, st in enumerate(prog.steps):
        if not st.is_comm and len(st.deps) == 1:
            d = st.deps[0]
            nd = node_of[d]
            if (not prog.steps[d].is_comm and dependents[d] == 1 and nd == len(nodes) - 1
                    and nodes[nd][1][-1] == d):
                nodes[nd][1].append(k)
                node_of.append(nd)
                continue
        deps = sorted({node_of[d] for d in st.deps})
        nodes.append(("comm" if st.is_comm else "comp", [k], deps, not st.deps))
        node_of.append(len(nodes) - 1)
    exits = sorted({node_of[e] for e in prog.exits})
    return _Fragment(nodes, exits)


class _Template:
    """The nodes of one pipeline stage's trace, shared by all its ranks."""

    def __init__(self, pb, roof: "Roofline | None" = None):
        self.pb = pb
        self.roof = roof
        self.nodes: list[_Node] = []
        self._acc_s = 0.0

    def _new(self, **kw) -> int:
        nid = len(self.nodes)
        self.nodes.append(_Node(id=nid, **kw))
        return nid

    def _micros(self, duration_s: float) -> int:
        """Whole microseconds, rounded along the rank's program so its total stays exact."""
        before = round(self._acc_s * 1e6)
        self._acc_s += duration_s
        return round(self._acc_s * 1e6) - before

    def compute(self, name: str, duration_s: float, flops: float, nbytes: float, deps, merge: bool = False) -> int:
        """A compute node; with ``merge``, a node that only follows the last node emitted (a compute
        node nothing depends on yet) extends it instead."""
        deps = sorted(set(deps))
        last = self.nodes[-1] if self.nodes else None
        if merge and last is not None and last.type == self.pb.COMP_NODE and deps == [last.id]:
            last.duration_us += self._micros(duration_s)
            last.duration_s += duration_s
            last.flops += int(round(flops))
            last.tensor_bytes += int(round(nbytes))
            last.merged += 1
            return last.id
        return self._new(name=name, type=self.pb.COMP_NODE, deps=deps, duration_us=self._micros(duration_s),
                         duration_s=duration_s, flops=int(round(flops)), tensor_bytes=int(round(nbytes)))

    def collective(self, name: str, op: Op, share: float, group_size: int, deps, ctrl=()) -> int:
        size = op.comm_bytes * share
        if op.collective == "all_gather":
            size /= group_size                     # ASTRA-sim: each rank's input
        elif op.collective == "send_recv":         # CP ring: the all-gather of K/V it amounts to
            size /= max(1, group_size - 1)
        ctype = {"all_reduce": self.pb.ALL_REDUCE, "all_gather": self.pb.ALL_GATHER, "send_recv": self.pb.ALL_GATHER,
                 "reduce_scatter": self.pb.REDUCE_SCATTER, "all_to_all": self.pb.ALL_TO_ALL}[op.collective]
        deps = sorted(set(deps) | set(ctrl))
        return self._new(name=name, type=self.pb.COMM_COLL_NODE, deps=deps, ctrl=sorted(set(ctrl)), comm_type=ctype,
                         comm_size=max(1, int(round(size))), hole=f"pg:{op.group}")

    def p2p(self, send: bool, name: str, nbytes: float, tag: int, direction: str, deps) -> int:
        return self._new(name=name, type=self.pb.COMM_SEND_NODE if send else self.pb.COMM_RECV_NODE,
                         deps=sorted(set(deps)), comm_size=max(1, int(round(nbytes))), tag=tag,
                         hole=f"{'send' if send else 'recv'}:{direction}")

    # -- serialization
    def serialize(self) -> list[bytes | tuple[bytes, str]]:
        """Items of the file after the metadata: whole records (bytes, merged) or holes
        (node bytes without the per-rank attributes, kind)."""
        pb = self.pb
        items: list[bytes | tuple[bytes, str]] = []
        cur: list[bytes] = []
        false_attr = pb.AttributeProto(name="is_cpu_op", bool_val=False)
        for n in self.nodes:
            name = n.name + (f"+{n.merged}b" if n.merged else "")
            node = pb.Node(id=n.id, name=name, type=n.type, duration_micros=n.duration_us)
            node.data_deps.extend(n.deps)
            if n.ctrl:
                node.ctrl_deps.extend(n.ctrl)
            attrs = [false_attr]
            if n.type == pb.COMP_NODE:
                num_ops, tensor_size = (self.roof.attributes(n.flops, n.tensor_bytes, n.duration_s)
                                        if self.roof is not None else (n.flops, n.tensor_bytes))
                attrs += [pb.AttributeProto(name="num_ops", int64_val=num_ops),
                          pb.AttributeProto(name="tensor_size", uint64_val=tensor_size)]
            elif n.type == pb.COMM_COLL_NODE:
                attrs += [pb.AttributeProto(name="comm_type", int64_val=n.comm_type),
                          pb.AttributeProto(name="comm_size", int64_val=n.comm_size)]
            else:
                attrs += [pb.AttributeProto(name="comm_tag", int32_val=n.tag),
                          pb.AttributeProto(name="comm_size", int64_val=n.comm_size)]
            node.attr.extend(attrs)
            payload = node.SerializeToString()
            if n.hole:
                if cur:
                    items.append(b"".join(cur))
                    cur = []
                items.append((payload, n.hole))
            else:
                cur.append(_record(payload))
        if cur:
            items.append(b"".join(cur))
        return items


_ATTR_FIELD = b"\x52"    # Node.attr: field 10, length-delimited


class _Splicer:
    """Assembles a rank's file from its stage template and its per-rank attributes.

    For a given length of each kind of per-rank field, the holes sit at fixed offsets of the file: the
    file is kept as one byte image per signature and a rank's fields are written into it in place
    (vectorized), so writing a rank costs a few array stores and one write call."""

    def __init__(self, items: list[bytes | tuple[bytes, str]], header: bytes = b""):
        self.items = items
        self.header = header
        self.kinds = sorted({it[1] for it in items if isinstance(it, tuple)})
        self._images: dict[tuple[int, ...], tuple[np.ndarray, dict[str, np.ndarray]]] = {}

    def _image(self, lengths: dict[str, int]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        sig = tuple(lengths[k] for k in self.kinds)
        cached = self._images.get(sig)
        if cached is None:
            parts = [self.header]
            offset = len(self.header)
            where: dict[str, list[int]] = {k: [] for k in self.kinds}
            for it in self.items:
                if isinstance(it, tuple):
                    payload, kind = it
                    head = _varint(len(payload) + lengths[kind]) + payload
                    parts.append(head)
                    offset += len(head)
                    where[kind].append(offset)
                    parts.append(bytes(lengths[kind]))
                    offset += lengths[kind]
                else:
                    parts.append(it)
                    offset += len(it)
            image = np.frombuffer(bytearray(b"".join(parts)), dtype=np.uint8)
            index = {k: (np.asarray(where[k], dtype=np.int64)[:, None] + np.arange(lengths[k])).ravel()
                     for k in self.kinds}
            cached = self._images[sig] = (image, index)
        return cached

    def assemble(self, var: dict[str, bytes]) -> np.ndarray:
        """The rank's file (header included), valid until the next call."""
        image, index = self._image({k: len(var[k]) for k in self.kinds})
        for k in self.kinds:
            idx = index[k]
            if idx.size:
                v = var[k]
                image[idx] = np.frombuffer(v * (idx.size // len(v)), dtype=np.uint8)
        return image


# ---- the exporter -----------------------------------------------------------------------------
@dataclass
class ChakraExport:
    directory: Path
    name: str
    ranks: int
    files: int
    bytes_written: int
    nodes_per_stage: list[int]
    groups_file: Path
    manifest_file: Path
    seconds: float
    layout: str = "files"

    def to_json(self) -> dict:
        return {"layout": self.layout, "schema": 1, "directory": str(self.directory), "name": self.name, "ranks": self.ranks,
                "files": self.files, "bytes_written": self.bytes_written, "nodes_per_stage": self.nodes_per_stage,
                "groups_file": str(self.groups_file), "manifest_file": str(self.manifest_file),
                "seconds": self.seconds}


def _fragments(graph, pricer, tp: int, overlap_tp: bool):
    """frag(stage, block, phase): the program of one block's forward ("F") or recompute + backward of a
    stage, and its fragment, built once per distinct op list and shared by every rank that runs it."""
    programs: dict[tuple, tuple[Program, _Fragment]] = {}

    def frag(stage: int, block: str, ph: str) -> tuple[Program, _Fragment]:
        b = block_of(graph.stages[stage], block)
        ops = b.fwd if ph == "F" else b.recompute + b.bwd
        key = (id(ops) if ph == "F" else (id(b.recompute), id(b.bwd)), ph)
        if key not in programs:
            prog = build_program(ops, pricer, tp, overlap_tp)
            programs[key] = (prog, _fragment(prog))
        return programs[key]
    return frag


def build_templates(graph: WorkloadGraph, pricer: Pricer | None = None) -> list[_Template]:
    """One template per pipeline stage: the nodes every rank of that stage runs."""
    pb = _pb()
    refuse_ep_overlap(graph.plan, graph.framework, "the Chakra exporter")
    pricer = pricer or Pricer(graph, profile_for(graph.job.cluster.gpu))
    plan = graph.plan
    if runs_dualpipe(getattr(plan, "pp_schedule", None), graph.framework, plan.pp, plan.vpp):
        return _dualpipe_templates(graph, pricer, pb)
    p, v, m = plan.pp, plan.vpp, graph.num_microbatches
    tp, overlap_tp = plan.tp, bool(plan.overlap_tp_comm)
    sizes = RankLayout(plan.tp, plan.cp, plan.dp, plan.pp, plan.ep).sizes()
    segments = chunk_segments(graph)
    p2p_bytes = graph.stages[0].p2p[0].comm_bytes if p > 1 else 0.0

    frag = _fragments(graph, pricer, tp, overlap_tp)

    def tag(ph: str, chunk: int, mb: int) -> int:
        return (mb * v + chunk) * 2 + (0 if ph == "F" else 1)

    templates = []
    roof = Roofline.of(graph)
    for i, sg in enumerate(graph.stages):
        t = _Template(pb, roof)
        chunks = segments[i]
        dpw = StageDP.of(sg, chunks, plan)
        dp_last: list[int] = []          # the DP stream's last node (FIFO order)
        rs_last: list[int] = []

        def dp_node(name: str, op: Op, share: float, deps, stream: list[int] = dp_last) -> int:
            nid = t.collective(name, op, share, sizes[op.group], deps, ctrl=stream[-1:])
            stream[:] = [nid]
            return nid

        def copy_node(ops, s: Segment, label: str, deps) -> list[int]:
            """FSDP2's copies ``ops`` of segment ``s`` (its share of each, by its parameters), one compute
            node each after ``deps``; [the last] ([] where none)."""
            out: list[int] = []
            for op in ops:   # (a copy node stays its own: the next block's kernels do not merge into it)
                total = sum(segment_weight(x, op.group) for c in chunks for x in c)
                w = segment_weight(s, op.group)
                if w > 0 and total > 0:
                    out = [t.compute(f"{label}.{op.name}", pricer.time(op) * w / total, 0.0, op.bytes * w / total,
                                     out or list(deps))]
                    copy_ids.add(out[0])
            return out

        copy_ids: set[int] = set()

        gate: dict[tuple[int, int], int] = {}
        if dpw.gate:
            for op, j, b in dpw.gather_order(v):
                nid = dp_node(f"{op.name}.c{j}", op, b.share, ())
                for s in range(b.first, b.last + 1):
                    gate[(j, s)] = nid
        order = stage_order(p, v, m, i)
        frontier: list[int] = []
        blocking: list[int] = []
        releases = {}
        if dpw.release:
            for op, j, b in dpw.grad_order(order, v):
                releases.setdefault((j, b.release), []).append((op, b))
        grad_nodes: list[int] = []
        deferred: list = []
        for ph, j, k in order:
            segs = chunks[j] if ph == "F" else chunks[j][::-1]
            idxs = list(range(len(segs))) if ph == "F" else list(range(len(segs) - 1, -1, -1))
            # FSDP2's copies on the compute stream: out after each all-gather, in before each reduce-scatter
            copy_out = dpw.copies("fwd" if ph == "F" else "bwd")
            copy_in = ((dpw.copies("", copy_in=True) if ph == "B" else ())
                       + (dpw.copies("step", copy_in=True) if ph == "B" and k == m - 1 else ()))
            entry = list(frontier) + blocking
            blocking = []
            if (i, j) != ((0, 0) if ph == "F" else (p - 1, v - 1)):
                direction = "fwd" if ph == "F" else "bwd"
                entry.append(t.p2p(False, f"recv.{direction}.c{j}.mb{k}", p2p_bytes, tag(ph, j, k), direction,
                                   frontier))
            seg_exits: list[list[int]] = []
            pass_start = list(entry)
            for q, (s, si) in enumerate(zip(segs, idxs)):
                prog, fr = frag(i, s.block, ph)
                if ph == "F" and k == 0 and (j, si) in gate:
                    entry.append(gate[(j, si)])
                for op in dpw.fsdp_ops:       # FSDP: this layer's parameters, one layer of prefetch
                    if op.collective != "all_gather" or op.phase.value != ("fwd" if ph == "F" else "bwd"):
                        continue
                    total = sum(segment_weight(x, op.group) for c in chunks for x in c)
                    w = segment_weight(s, op.group)
                    if w > 0 and total > 0:
                        ahead = 2 if plan.overlap_param_gather else 1
                        pre = seg_exits[q - ahead] if q >= ahead else pass_start
                        entry.append(dp_node(f"{op.name}.{s.label}.mb{k}", op, w / total, pre))
                entry = copy_node(copy_out, s, f"{ph}{k}.{s.label}", entry) or entry
                ids: list[int] = []
                waits: dict[int, list[int]] = {}     # TP-overlap wait node -> its dependencies
                joins: dict[int, list[int]] = {}     # exit wait node -> the collective beside its GEMM
                for kind, steps, deps, is_entry in fr.nodes:
                    node_deps = [ids[d] for d in deps] + (entry if is_entry else [])
                    node_deps += [c for d in node_deps for c in joins.get(d, ())]
                    first = prog.steps[steps[0]]
                    label = f"{ph}{k}.{s.label}.{first.op.name}" + (f"+{len(steps) - 1}" if len(steps) > 1 else "")
                    if kind == "comp":
                        # a block's first kernels continue the previous block's last ones within a pass
                        ids.append(t.compute(label, sum(prog.steps[x].duration_s for x in steps),
                                             sum(prog.steps[x].op.flops * prog.steps[x].fraction for x in steps),
                                             sum(prog.steps[x].op.bytes * prog.steps[x].fraction for x in steps),
                                             node_deps, merge=is_entry and q > 0 and t.nodes[-1].id not in copy_ids))
                    elif first.part == "exposed":
                        # TP overlap: the chunk the GEMM waits for is a wait on the compute stream, of
                        # its priced time; the collective itself is written once, whole, beside the GEMM
                        # (".o"), so ASTRA-sim charges its per-collective latency once and hides it
                        # exit (a reduce-scatter's last chunk after its GEMM): the wait follows the GEMM
                        # and what comes next also waits for the collective: max(GEMM + chunk, collective)
                        beside = [d for d in node_deps if t.nodes[d].type == t.pb.COMM_COLL_NODE
                                  and t.nodes[d].name.endswith(".o")]
                        ids.append(t.compute(label + ".x", first.duration_s, 0.0, 0.0,
                                             [d for d in node_deps if d not in beside]))
                        waits[ids[-1]] = node_deps
                        if beside:
                            joins[ids[-1]] = beside
                    else:
                        whole = first.part == "overlapped"
                        if whole:
                            label += ".o"
                            # it starts with the wait for its first chunk (enter), not after it
                            node_deps = [x for d in node_deps for x in waits.get(d, [d])]
                        ids.append(t.collective(label, first.op, 1.0 if whole else first.fraction,
                                                sizes[first.op.group], node_deps))
                frontier = [ids[x] for x in fr.exits]
                frontier += [c for d in frontier for c in joins.get(d, ()) if c not in frontier]
                frontier = copy_node(copy_in, s, f"{ph}{k}.{s.label}", frontier) or frontier
                seg_exits.append(frontier)
                entry = list(frontier)
                if ph == "B" and k == m - 1:
                    # gradient buckets released in this pass are issued when the pass ends: ASTRA-sim
                    # runs one collective per rank at a time, so a bucket issued at its release point
                    # would hold back the pass's remaining TP collectives (see docs/trace.md)
                    deferred += [(op, b, j) for op, b in releases.get((j, si), ())]
                for op in dpw.fsdp_ops:
                    if op.collective == "reduce_scatter" and ph == "B":
                        total = sum(segment_weight(x, op.group) for c in chunks for x in c)
                        w = segment_weight(s, op.group)
                        if w > 0 and total > 0:
                            grad_nodes.append(dp_node(f"{op.name}.{s.label}.mb{k}", op, w / total, frontier,
                                                      stream=rs_last))
            nxt = next_virtual(i, j, p, v, ph == "F")
            if nxt is not None:
                direction = "fwd" if ph == "F" else "bwd"
                sid = t.p2p(True, f"send.{direction}.c{nxt[1]}.mb{k}", p2p_bytes, tag(ph, nxt[1], k), direction,
                            frontier)
                if not plan.overlap_pp_comm:
                    blocking.append(sid)
            for op, b, jj in deferred:
                grad_nodes.append(dp_node(f"{op.name}.c{jj}", op, b.share, frontier))
            deferred = []
        if not dpw.release:
            for op, j, b in dpw.grad_order(order, v):
                grad_nodes.append(dp_node(f"{op.name}.c{j}", op, b.share, frontier))
        if dpw.optimizer is not None:
            op = dpw.optimizer
            frontier = [t.compute("optimizer.adam", pricer.time(op), op.flops, op.bytes,
                                  frontier + blocking + grad_nodes[-1:] + rs_last)]
        if dpw.gather_ops and not dpw.gate:
            gathered = [dp_node(op.name, op, 1.0, frontier) for op in dpw.gather_ops]
            for op in dpw.copies("step"):      # FSDP2 gathering once per step: copied out into the parameters
                frontier = [t.compute(op.name, pricer.time(op), 0.0, op.bytes, frontier + gathered)]
        templates.append(t)
    return templates


def _dualpipe_templates(graph: WorkloadGraph, pricer: Pricer, pb) -> list[_Template]:
    """One template per pipeline rank of a DualPipe plan (DeepSeek-V3 report Sec. 3.2.1; sim/dualpipe.py):
    rank r holds stages r (direction 0, entering at rank 0) and p-1-r (direction 1, entering at rank
    p-1) and runs the reference implementation's order (``dualpipe_order``, the one the replay runs).

    - a chunk is its layers' block programs as nodes (compute merged along chains, TP/EP collectives
      as collective nodes: the EP all-to-alls on the EP group's ``pg_name``); a backward with its
      weight gradients deferred (zero bubble) leaves its ``.wgrad`` kernels out, written later as the
      W nodes of that chunk, layer by layer;
    - an overlapped pair (forward of one direction, backward of the other) is the two chunks as two
      dependency chains from the same point, joined at their ends: ASTRA-sim runs one compute node at a
      time and the communication beside it, so each chain's all-to-alls run under the other's compute;
      the SMs those all-to-alls take (``DUALPIPE_COMM_SMS``, Sec. 3.2.2) are one compute node at the join
      of that share of their seconds, as the replay charges them;
    - pipeline transfers: a send after the chunk's last node, to rank r+1 for the forward of direction 0
      and the backward of direction 1 (their ``fwd`` peer), to r-1 for the other two; a receive before
      a chunk that does not enter the pipeline at this rank. Tags (micro-batch, direction, phase)
      match each send to its receive;
    - once per step: each stage's gradient buckets after its last backward or W, then both stages'
      optimizers, ZeRO's parameter all-gathers gating the first forwards (overlap_param_gather) or
      after the optimizer."""
    plan = graph.plan
    p, m = plan.pp, graph.num_microbatches
    if plan.zero_stage >= 3 or any(sg.microbatch_dp_ops for sg in graph.stages):
        raise PlanError("plan.zero", "the Chakra exporter does not write FSDP under DualPipe", "set zero=1 or zero=2")
    if m % 2 or m < 2 * p:
        raise PlanError("global_batch", f"DualPipe needs an even number of micro-batches, at least 2 x pp = {2 * p} "
                        f"(this plan has {m})", "raise the global batch or lower the pipeline depth")
    h = m // 2
    tp, overlap_tp = plan.tp, bool(plan.overlap_tp_comm)
    sizes = RankLayout(plan.tp, plan.cp, plan.dp, plan.pp, plan.ep).sizes()
    segments = chunk_segments(graph)
    roof = Roofline.of(graph)

    frag = _fragments(graph, pricer, tp, overlap_tp)

    def p2p_bytes(stage: int, ph: str) -> float:
        what = "activation" if ph == "F" else "gradient"
        return {o.name: o for o in graph.stages[stage].p2p}[f"pp.{what}.chunk0"].comm_bytes

    def toward(ph: str, d: int) -> str:
        """The per-rank peer fields a chunk's transfers use: "fwd" sends to r+1 and receives from r-1,
        "bwd" the reverse (_rank_fields)."""
        return "fwd" if (ph == "F") == (d == 0) else "bwd"

    def enters(r: int, ph: str, d: int) -> bool:
        first = (0 if d == 0 else p - 1) if ph == "F" else (p - 1 if d == 0 else 0)
        return r == first

    def tag(ph: str, d: int, k: int) -> int:
        return (k * 2 + d) * 2 + (0 if ph == "F" else 1)

    templates = []
    for r in range(p):
        t = _Template(pb, roof)
        stage_of = {0: r, 1: p - 1 - r}
        stages = sorted(set(stage_of.values()))
        dps = {st: StageDP.of(graph.stages[st], segments[st], plan) for st in stages}
        dp_last: list[int] = []

        def dp_node(name: str, op: Op, share: float, deps) -> int:
            nid = t.collective(name, op, share, sizes[op.group], deps, ctrl=dp_last[-1:])
            dp_last[:] = [nid]
            return nid

        gate: dict[tuple[int, int], int] = {}
        for st in stages:
            if dps[st].gate:
                for op, _, b in dps[st].gather_order(1):
                    nid = dp_node(f"{op.name}.s{st}", op, b.share, ())
                    for si in range(b.first, b.last + 1):
                        gate[(st, si)] = nid
        counter = {(ph, d): 0 for ph in "FB" for d in (0, 1)}
        deferred: list[tuple[int, str, list[tuple[str, float, float, float]]]] = []
        grad_done: dict[int, int] = {}          # stage -> the node that last wrote its weight gradients
        last: list[int] = []

        a2a_s = [0.0]      # the all-to-all seconds of the chunks emitted (for the pairs' SM share)

        def chain(ph: str, d: int, zb: bool, start: list[int]) -> list[int]:
            """A chunk's nodes after ``start``: [its last node]."""
            stage = stage_of[d]
            k = counter[(ph, d)]
            counter[(ph, d)] += 1
            name = f"{ph}{d}.{k}"
            entry = list(start)
            if not enters(r, ph, d):
                q = r - 1 if toward(ph, d) == "fwd" else r + 1          # the sending rank
                entry.append(t.p2p(False, f"recv.{name}", p2p_bytes(q if d == 0 else p - 1 - q, ph),
                                   tag(ph, d, k), toward(ph, d), start))
            segs = segments[stage][0]
            idxs = list(range(len(segs))) if ph == "F" else list(range(len(segs) - 1, -1, -1))
            ws = []
            for q, si in enumerate(idxs):
                s = segs[si]
                prog, fr = frag(stage, s.block, ph)
                if ph == "F" and k == 0 and (stage, si) in gate:
                    entry.append(gate[(stage, si)])
                ids: list[int] = []
                joins: dict[int, list[int]] = {}
                w = [0.0, 0.0, 0.0]
                for kind, steps, deps, is_entry in fr.nodes:
                    node_deps = [ids[x] for x in deps] + (entry if is_entry else [])
                    node_deps += [c for x in node_deps for c in joins.get(x, ())]
                    first = prog.steps[steps[0]]
                    label = f"{name}.{s.label}.{first.op.name}" + (f"+{len(steps) - 1}" if len(steps) > 1 else "")
                    if kind == "comp":
                        keep = []
                        for x in steps:
                            st_ = prog.steps[x]
                            if zb and st_.op.name.endswith(".wgrad"):   # deferred to this chunk's W
                                w[0] += st_.duration_s
                                w[1] += st_.op.flops * st_.fraction
                                w[2] += st_.op.bytes * st_.fraction
                            else:
                                keep.append(st_)
                        ids.append(t.compute(label, sum(x.duration_s for x in keep),
                                             sum(x.op.flops * x.fraction for x in keep),
                                             sum(x.op.bytes * x.fraction for x in keep), node_deps))
                    elif first.part == "exposed":    # TP overlap, as in the 1F1B templates
                        beside = [x for x in node_deps if t.nodes[x].type == pb.COMM_COLL_NODE
                                  and t.nodes[x].name.endswith(".o")]
                        ids.append(t.compute(label + ".x", first.duration_s, 0.0, 0.0,
                                             [x for x in node_deps if x not in beside]))
                        if beside:
                            joins[ids[-1]] = beside
                    else:
                        whole = first.part == "overlapped"
                        if first.op.group == "ep":
                            a2a_s[0] += first.duration_s
                        ids.append(t.collective(label + (".o" if whole else ""), first.op,
                                                1.0 if whole else first.fraction, sizes[first.op.group], node_deps))
                entry = [ids[x] for x in fr.exits]
                entry += [c for x in entry for c in joins.get(x, ()) if c not in entry]
                if zb and w[0] > 0:
                    ws.append((f"W{d}.{k}.{s.label}", *w))
            end = entry
            if len(end) > 1:
                end = [t.compute(f"{name}.end", 0.0, 0.0, 0.0, end)]
            if ph == "B":
                if zb:
                    deferred.append((stage, name, ws))
                else:
                    grad_done[stage] = end[0]
            last_rank = (p - 1 if d == 0 else 0) if ph == "F" else (0 if d == 0 else p - 1)
            if r != last_rank:
                t.p2p(True, f"send.{name}", p2p_bytes(stage, ph), tag(ph, d, k), toward(ph, d), end)
            return end

        for item in dualpipe_order(p, r, h):
            if item[0] == "F":
                last = chain("F", item[1], False, last)
            elif item[0] == "B":
                last = chain("B", item[1], item[2], last)
            elif item[0] == "FB":
                a2a_s[0] = 0.0
                a = chain("F", item[1], False, last)
                b = chain("B", item[2], False, last)
                # the pair's all-to-alls take DUALPIPE_COMM_SMS of the SMs while they run beside the other
                # chunk's compute (report Sec. 3.2.2), which runs slower by that share for as long as they
                # run (the replay's charge): one compute node before the pair's end
                share = DUALPIPE_COMM_SMS / graph.job.cluster.gpu.sm_count
                last = [t.compute(f"F{item[1]}+B{item[2]}.sm_share", share * a2a_s[0], 0.0, 0.0, a + b)]
            else:
                stage, name, ws = deferred.pop(0)
                for label, dur, flops, nbytes in ws:
                    last = [t.compute(label, dur, flops, nbytes, last)]
                grad_done[stage] = last[0]
        grads: list[int] = []
        for stage in sorted(stages, key=lambda st: grad_done[st]):      # in the order the stages finish
            dpw = dps[stage]
            for op, _, b in dpw.grad_order((("B", 0, 0),), 1):
                grads.append(dp_node(f"{op.name}.s{stage}", op, b.share, [grad_done[stage]]))
        for stage in stages:
            op = dps[stage].optimizer
            if op is not None:
                last = [t.compute(f"optimizer.adam.s{stage}", pricer.time(op), op.flops, op.bytes,
                                  last + grads[-1:])]
        for stage in stages:
            if dps[stage].gather_ops and not dps[stage].gate:
                for op in dps[stage].gather_ops:
                    dp_node(f"{op.name}.s{stage}", op, 1.0, last)
        templates.append(t)
    return templates


def _attr(pb, **kw) -> bytes:
    payload = pb.AttributeProto(**kw).SerializeToString()
    return _ATTR_FIELD + _varint(len(payload)) + payload


COMPACT_MAGIC = b"CTETSTAGE1\n"
COMPACT_THRESHOLD = 4096      # ranks above which ``layout="auto"`` writes the compact layout


def _rank_fields(pb, layout: RankLayout, groups: GroupIds, r: int, pg_cache: dict[int, bytes]) -> dict[str, bytes]:
    """The serialized per-rank attributes of rank r: its group ids and its pipeline peers."""
    def pg(gid: int) -> bytes:
        b = pg_cache.get(gid)
        if b is None:
            b = pg_cache[gid] = _attr(pb, name="pg_name", string_val=str(gid))
        return b

    def peers(src: int, dst: int) -> bytes:
        return _attr(pb, name="comm_src", int32_val=src) + _attr(pb, name="comm_dst", int32_val=dst)

    S, p = layout.stage_stride, layout.pp
    stage = r // S
    var = {f"pg:{k}": pg(groups.id(k, r)) for k in groups.kinds}
    if p > 1:
        nxt = r + ((stage + 1) % p - stage) * S
        prv = r + ((stage - 1) % p - stage) * S
        var["send:fwd"] = peers(r, nxt)
        var["send:bwd"] = peers(r, prv)
        var["recv:fwd"] = peers(prv, r)
        var["recv:bwd"] = peers(nxt, r)
    return var


def _write_ranks(pb, splicers: list["_Splicer"], layout: RankLayout, groups: GroupIds, out: Path, name: str,
                 ranks, progress: Callable[[int, int], None] | None = None) -> int:
    pg_cache: dict[int, bytes] = {}
    total = 0
    ranks = list(ranks)
    n = len(ranks)
    for i, r in enumerate(ranks):
        data = splicers[r // layout.stage_stride].assemble(_rank_fields(pb, layout, groups, r, pg_cache))
        path = out / f"{name}.{r}.et"
        try:
            with open(path, "wb") as f:
                f.write(data)
        except OSError as e:
            raise DataError("out", f"cannot write {str(path)!r} ({e.strerror or e})",
                            "check the directory and free space") from None
        total += data.size
        if progress is not None and (i % 1024 == 0 or i == n - 1):
            progress(i + 1, n)
    return total


def _pack_stage(items: list[bytes | tuple[bytes, str]], header: bytes) -> bytes:
    """A stage template as the compact layout stores it: the magic line, then records of
    (tag, kind, length, bytes): tag 0 = bytes as they are, 1 = a node missing its per-rank
    attributes of ``kind``; the first record is the file's GlobalMetadata record."""
    kinds = sorted({it[1] for it in items if isinstance(it, tuple)})
    head = json.dumps(kinds).encode()
    parts = [COMPACT_MAGIC, len(head).to_bytes(4, "little"), head,
             b"\x00\x00" + len(header).to_bytes(8, "little"), header]
    for it in items:
        if isinstance(it, tuple):
            payload, kind = it
            parts += [b"\x01" + kinds.index(kind).to_bytes(1, "little") + len(payload).to_bytes(8, "little"), payload]
        else:
            parts += [b"\x00\x00" + len(it).to_bytes(8, "little"), it]
    return b"".join(parts)


def _unpack_stage(data: bytes) -> tuple[list[bytes | tuple[bytes, str]], bytes]:
    if not data.startswith(COMPACT_MAGIC):
        raise DataError("trace", "not a clustertwin compact stage template", "give the directory `trace` wrote")
    i = len(COMPACT_MAGIC)
    hl = int.from_bytes(data[i:i + 4], "little")
    kinds = json.loads(data[i + 4:i + 4 + hl])
    i += 4 + hl
    items: list[bytes | tuple[bytes, str]] = []
    header = b""
    first = True
    while i < len(data):
        tag, kind = data[i], data[i + 1]
        size = int.from_bytes(data[i + 2:i + 10], "little")
        chunk = data[i + 10:i + 10 + size]
        i += 10 + size
        if first:
            header, first = chunk, False
        elif tag:
            items.append((chunk, kinds[kind]))
        else:
            items.append(chunk)
    return items, header


def write_chakra(graph: WorkloadGraph, out_dir: str | Path, name: str = "workload", pricer: Pricer | None = None,
                 progress: Callable[[int, int], None] | None = None, layout: str = "auto",
                 configs: bool = True) -> ChakraExport:
    """Write the communicator groups (``<name>.groups.json``), a manifest (``<name>.manifest.json``),
    ASTRA-sim's network, system and remote-memory files with a README (``configs``), and the traces:

    - ``layout="files"``: ``out_dir/<name>.<rank>.et`` for every rank;
    - ``layout="compact"``: one template per pipeline stage (``<name>.stage<i>.ctet``); ``expand``
      writes any ranks' ``<name>.<rank>.et`` from them, byte for byte what ``files`` writes;
    - ``layout="auto"``: ``files`` up to COMPACT_THRESHOLD ranks, ``compact`` above."""
    t0 = time.perf_counter()
    pb = _pb()
    if not name or any(c in name for c in "/\\") or name.startswith("."):
        raise DataError("name", f"{name!r} is not a file-name prefix", "give a plain name such as 'workload'")
    if layout not in ("auto", "files", "compact"):
        raise DataError("layout", f"{layout!r} is not a layout", "give files, compact or auto")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise DataError("out", f"{str(out)!r} is a file", "give a directory for the per-rank traces")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError("out", f"cannot create {str(out)!r} ({e.strerror or e})",
                        "choose a writable directory") from None
    if not out.is_dir():
        raise DataError("out", f"{str(out)!r} is not a directory", "give a directory for the per-rank traces")
    plan = graph.plan
    rl = RankLayout(plan.tp, plan.cp, plan.dp, plan.pp, plan.ep)
    n = rl.world
    if layout == "auto":
        layout = "compact" if n > COMPACT_THRESHOLD else "files"
    pricer = pricer or Pricer(graph, profile_for(graph.job.cluster.gpu))
    templates = build_templates(graph, pricer)
    kinds = sorted({nd.hole[3:] for t in templates for nd in t.nodes if nd.hole.startswith("pg:")},
                   key=GROUP_KINDS.index)
    groups = GroupIds(rl, kinds)
    meta = pb.GlobalMetadata(version=SCHEMA_VERSION)
    meta.attr.extend([pb.AttributeProto(name="producer", string_val="clustertwin"),
                      pb.AttributeProto(name="model", string_val=graph.job.model.name),
                      pb.AttributeProto(name="plan", string_val=plan.short()),
                      pb.AttributeProto(name="world_size", int64_val=n)])
    header = _record(meta.SerializeToString())
    items = [t.serialize() for t in templates]
    total_bytes = 0
    stage_files: list[str] = []
    if layout == "files":
        total_bytes = _write_ranks(pb, [_Splicer(it, header) for it in items], rl, groups, out, name, range(n),
                                   progress)
        files = n
    else:
        for i, it in enumerate(items):
            fname = f"{name}.stage{i}.ctet"
            data = _pack_stage(it, header)
            (out / fname).write_bytes(data)
            stage_files.append(fname)
            total_bytes += len(data)
        files = len(items)
    groups_file = out / f"{name}.groups.json"
    groups_file.write_text(json.dumps(groups.table(), separators=(",", ":")) + "\n", encoding="utf-8")
    astra_files = {}
    if configs:
        from .astra import write_astra_configs
        astra_files = write_astra_configs(graph, pricer.profile, out, name, compact=layout == "compact")
    manifest = out / f"{name}.manifest.json"
    manifest.write_text(json.dumps({
        "schema": 1,
        "format": "chakra-et",
        "chakra_schema_version": SCHEMA_VERSION,
        "layout": layout,
        "prefix": name,
        "files": f"{name}.<rank>.et",
        "stage_templates": stage_files,
        "ranks": n,
        "comm_group_configuration": groups_file.name,
        "astra_sim": astra_files,
        "model": graph.job.model.name,
        "plan": plan.short(),
        "num_microbatches": graph.num_microbatches,
        "rank_order": ["tp", "cp", "dp", "pp"],
        "rank_layout": {"tp": rl.tp, "cp": rl.cp, "dp": rl.dp, "pp": rl.pp, "ep": rl.ep},
        "group_kinds": groups.kinds,
        "group_sizes": {k: rl.sizes()[k] for k in groups.kinds},
        "nodes_per_stage": [len(t.nodes) for t in templates],
    }, indent=2) + "\n", encoding="utf-8")
    return ChakraExport(out, name, n, files, total_bytes, [len(t.nodes) for t in templates], groups_file, manifest,
                        time.perf_counter() - t0, layout)


def parse_ranks(text: str, world: int) -> list[int]:
    """Ranks from "0,8,16-23" (ranges inclusive); "all" is every rank."""
    if text.strip() == "all":
        return list(range(world))
    out: list[int] = []
    for item in text.replace(";", ",").split(","):
        item = item.strip()
        if not item:
            continue
        try:
            if "-" in item:
                a, b = (int(x) for x in item.split("-", 1))
                out.extend(range(a, b + 1))
            else:
                out.append(int(item))
        except ValueError:
            raise DataError("ranks", f"{item!r} is not a rank or a range", 'give e.g. "0,8,16-23" or "all"') from None
    bad = [r for r in out if not 0 <= r < world]
    if bad or not out:
        raise DataError("ranks", f"{bad[0] if bad else 'none'} is not a rank of 0..{world - 1}",
                        'give e.g. "0,8,16-23" or "all"')
    return out


def expand(directory: str | Path, name: str = "workload", ranks: list[int] | None = None,
           out_dir: str | Path | None = None, progress: Callable[[int, int], None] | None = None) -> tuple[Path, int, int]:
    """Write ``<name>.<rank>.et`` for ``ranks`` (default: all) from a compact export in ``directory``
    into ``out_dir`` (default: the same directory), with the groups file and ASTRA-sim configs
    copied beside them when the output is elsewhere. Returns (directory, files, bytes)."""
    pb = _pb()
    src = Path(directory)
    mpath = src / f"{name}.manifest.json"
    try:
        man = json.loads(mpath.read_text(encoding="utf-8"))
    except OSError:
        raise DataError("trace", f"no {mpath.name} in {str(src)!r}",
                        "give the directory and --name that `clustertwin trace --format chakra` wrote") from None
    if man.get("layout") != "compact":
        raise DataError("trace", f"{str(src)!r} holds per-rank files already", "nothing to expand")
    rl = RankLayout(**man["rank_layout"])
    groups = GroupIds(rl, man["group_kinds"])
    splicers = []
    for fname in man["stage_templates"]:
        items, header = _unpack_stage((src / fname).read_bytes())
        splicers.append(_Splicer(items, header))
    out = Path(out_dir) if out_dir is not None else src
    out.mkdir(parents=True, exist_ok=True)
    if out.resolve() != src.resolve():
        import shutil
        for f in [man["comm_group_configuration"], *man.get("astra_sim", {}).values()]:
            shutil.copyfile(src / f, out / f)
    todo = list(range(rl.world)) if ranks is None else ranks
    nbytes = _write_ranks(pb, splicers, rl, groups, out, name, todo, progress)
    return out, len(todo), nbytes


def read_trace(path: str | Path) -> tuple[object, list]:
    """Decode one trace file with the package's own reader: (GlobalMetadata, [Node, ...])."""
    pb = _pb()
    from chakra.src.third_party.utils.protolib import decodeMessage, openFileRd
    f = openFileRd(str(path))
    try:
        meta = pb.GlobalMetadata()
        decodeMessage(f, meta)
        nodes = []
        while True:
            node = pb.Node()
            if not decodeMessage(f, node):
                break
            nodes.append(node)
    finally:
        f.close()
    return meta, nodes


__all__ = ["write_chakra", "expand", "parse_ranks", "Roofline", "build_templates", "read_trace", "ChakraExport", "RankLayout", "GroupIds",
           "ChakraUnavailable", "SCHEMA_VERSION"]
