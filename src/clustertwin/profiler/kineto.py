"""Read PyTorch profiler (Kineto) JSON traces: the GPU kernels of each profiled step, classified, with
the shapes of the GEMMs and the message sizes of the collectives where the trace records them.

A Kineto trace (``torch.profiler`` with ``on_trace_ready=tensorboard_trace_handler`` or
``prof.export_chrome_trace``; ``.json`` or ``.json.gz``) is Chrome trace-event JSON: ``traceEvents``
of complete events (``"ph": "X"``, microseconds). What is read:

- GPU activity: ``cat`` ``kernel`` (``Kernel`` in older producers), ``gpu_memcpy``, ``gpu_memset``; the
  stream is ``args.stream`` (else ``tid``).
- Steps: the CPU annotations ``ProfilerStep#N``. A kernel belongs to the step during which the host
  launched it (its ``cuda_runtime``/``cuda_driver`` launch event, matched by ``args.correlation``), so
  work queued in one step and run in the next is counted where it was issued.
- The op that launched a kernel: the CPU ops (``cat`` ``cpu_op``) enclosing the launch event on the same
  thread; newer producers (PyTorch >= 2.1 or so) also give the kernel the op's ``External id``. GEMM
  shapes come from the op's ``Input Dims`` (recorded with ``record_shapes=True``): ``aten::mm``,
  ``addmm``, ``bmm``, ``baddbmm``, ``matmul``, ``linear``.
- Collectives: NCCL kernels by name (``ncclKernel_AllReduce_RING_LL_Sum_float``,
  ``ncclDevKernel_AllGather_RING_LL``, ...); message size, dtype and group from the kernel's or the
  ``record_param_comms`` op's ``In msg nelems``/``Out msg nelems``/``dtype``/``Group size``/
  ``Process Group Ranks`` (PyTorch >= 2.0 with the NCCL profiler); without them a collective is timed but
  not sized.
"""
from __future__ import annotations

import bisect
import gzip
import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ..errors import DataError

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
_LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "runtime"}
GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
            "aten::_scaled_mm")
ATTENTION_OPS = ("aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
                 "aten::_scaled_dot_product_cudnn_attention", "aten::_flash_attention_forward",
                 "aten::_efficient_attention_forward", "aten::_scaled_dot_product_flash_attention_backward",
                 "aten::_scaled_dot_product_efficient_attention_backward",
                 "aten::_scaled_dot_product_cudnn_attention_backward", "aten::_flash_attention_backward",
                 "aten::_efficient_attention_backward")
_ELEMENT_BYTES = {"float": 4, "double": 8, "c10::half": 2, "c10::bfloat16": 2, "half": 2, "bfloat16": 2,
                  "float16": 2, "float32": 4, "int": 4, "long int": 8, "int64": 8, "c10::float8_e4m3fn": 1,
                  "c10::float8_e5m2": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "byte": 1, "int8": 1,
                  "unsigned char": 1, "signed char": 1, "bool": 1}
_NCCL_KIND = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
              "alltoall": "all_to_all", "alltoallv": "all_to_all", "alltoallbase": "all_to_all",
              "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "send_recv", "send": "send_recv",
              "recv": "send_recv", "_allgather_base": "all_gather", "allgather_into_tensor_coalesced": "all_gather",
              "_reduce_scatter_base": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
              "allreduce_coalesced": "all_reduce", "all_gather_into_tensor": "all_gather",
              "reduce_scatter_tensor": "reduce_scatter", "gather": "gather", "scatter": "scatter"}


@dataclass(frozen=True)
class GemmShape:
    """One GEMM as the op that launched it saw it: batch x (m x k) @ (k x n)."""
    batch: int
    m: int
    n: int
    k: int
    dtype: str          # bf16 | fp16 | tf32 | fp32 | fp8

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k


@dataclass(frozen=True)
class AttentionShape:
    batch: int
    heads: int
    seq_q: int
    seq_kv: int
    head_dim: int
    bwd: bool


@dataclass
class Kernel:
    """One GPU activity (kernel, memcpy or memset) of a step."""
    name: str
    ts: float                 # microseconds, trace clock
    dur: float                # microseconds
    stream: int
    category: str             # see classify.CATEGORIES
    family: str               # a short name grouping kernels of one kind (classify.family)
    step: int = -1            # index into Trace.steps; -1 outside every step
    op: str = ""              # the innermost CPU op that launched it ("" if unknown)
    op_id: int = -1           # that op's identity (External id, or its position) to sum a GEMM's kernels
    gemm: GemmShape | None = None
    attention: AttentionShape | None = None
    collective: str = ""      # all_reduce | all_gather | reduce_scatter | all_to_all | send_recv | ...
    comm_bytes: float = 0.0   # the full buffer, as clustertwin's ops count it (0: not recorded)
    group_size: int = 0       # ranks in the collective's group (0: not recorded)
    group_ranks: tuple[int, ...] = ()
    group_name: str = ""      # the process group's name (``Process Group Name``/``pg_name``: "0", "3", ...)
    group_desc: str = ""      # its description where the trace has one (``Process Group Description``)
    phase: str = ""           # fwd | bwd (launched under an autograd backward op) | "" (no CPU op known)
    module: str = ""          # the innermost nn.Module that launched it (``with_modules=True``: "Qwen2RMSNorm")
    bytes: float = 0.0        # memcpy/memset bytes; elementwise: bytes read + written, estimated from shapes

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass
class Step:
    name: str
    number: int
    start: float
    end: float

    @property
    def dur(self) -> float:
        return self.end - self.start


@dataclass
class Trace:
    path: str
    producer: str
    device_name: str
    rank: int
    world_size: int
    steps: list[Step]
    kernels: list[Kernel]
    record_shapes: bool = False
    device_memory_bytes: float = 0.0     # deviceProperties[0].totalGlobalMem (0: not recorded)
    notes: list[str] = field(default_factory=list)

    def step_kernels(self, i: int) -> list[Kernel]:
        return [k for k in self.kernels if k.step == i]


def _bad(path: Path, problem: str, fix: str) -> DataError:
    return DataError(f"trace {path.name}", problem, fix)


def load_json(path: Path) -> Any:
    """The JSON document of ``path`` (gzip by magic number, whatever the suffix)."""
    if not path.is_file():
        raise _bad(path, "no such file", "give the path of a PyTorch profiler trace (.json or .json.gz)")
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return json.loads(raw)
    except (OSError, EOFError, ValueError, UnicodeDecodeError) as e:
        raise _bad(path, f"not JSON ({type(e).__name__})",
                   "give a PyTorch profiler (Kineto) trace: prof.export_chrome_trace or tensorboard_trace_handler") from None


def _dims(args: dict) -> list:
    d = args.get("Input Dims")
    return d if isinstance(d, list) else []


def _types(args: dict) -> list:
    t = args.get("Input type")
    return t if isinstance(t, list) else []


def _prod(xs: Iterable[int]) -> int:
    p = 1
    for x in xs:
        p *= int(x)
    return p


def _gemm_dtype(types: list, kernel_name: str) -> str:
    t = str(types[0] if types else "").lower()
    kn = kernel_name.lower()
    if "float8" in t or "e4m3" in kn:
        return "fp8"
    if "bfloat16" in t or "bf16" in kn:
        return "bf16"
    if "half" in t or "float16" in t:
        return "fp16"
    if t in ("float", "float32") or not t:
        if "sgemm" in kn or "ffma" in kn:
            return "fp32"
        if "tf32" in kn or "s1688" in kn or "s16816" in kn or "tensorop_s" in kn or "xmma" in kn or not t:
            return "tf32"
        return "fp32"
    return "bf16"


def gemm_shape(op: str, dims: list, types: list, kernel_name: str = "") -> GemmShape | None:
    """The GEMM an aten op with ``Input Dims`` ``dims`` computes, or None when the dims do not say."""
    try:
        dt = _gemm_dtype(types, kernel_name)
        if op in ("aten::mm", "aten::_scaled_mm"):
            (m, k), (k2, n) = dims[0][-2:], dims[1][-2:]
            return GemmShape(1, m, n, k, dt) if k == k2 else None
        if op == "aten::addmm":
            (m, k), (k2, n) = dims[1], dims[2]
            return GemmShape(1, m, n, k, dt) if k == k2 else None
        if op == "aten::bmm":
            (b, m, k), (b2, k2, n) = dims[0], dims[1]
            return GemmShape(b, m, n, k, dt) if k == k2 and b == b2 else None
        if op == "aten::baddbmm":
            (b, m, k), (b2, k2, n) = dims[1], dims[2]
            return GemmShape(b, m, n, k, dt) if k == k2 and b == b2 else None
        if op == "aten::linear":
            a, w = dims[0], dims[1]
            if len(w) != 2 or not a or a[-1] != w[1]:
                return None
            return GemmShape(1, _prod(a[:-1]), w[0], w[1], dt)
        if op == "aten::matmul":
            a, b = dims[0], dims[1]
            if len(a) >= 2 and len(b) == 2 and a[-1] == b[0]:
                return GemmShape(1, _prod(a[:-1]), b[1], b[0], dt)
            if len(a) >= 3 and len(b) == len(a) and a[-1] == b[-2]:
                return GemmShape(_prod(a[:-2]), a[-2], b[-1], a[-1], dt)
    except (TypeError, ValueError, IndexError):
        return None
    return None


def attention_shape(op: str, dims: list) -> AttentionShape | None:
    """(batch, heads, seq, head dim) of an SDPA op: query [b, h, s_q, d], key [b, h_kv, s_kv, d]."""
    try:
        q, k = dims[0] if "backward" not in op else dims[1], dims[1] if "backward" not in op else dims[2]
        if len(q) != 4 or len(k) != 4:
            return None
        if op.startswith("aten::_flash_attention") or op.startswith("aten::_efficient_attention"):
            b, s_q, h, d = q            # these take [b, s, h, d]
            s_kv = k[1]
        else:
            b, h, s_q, d = q
            s_kv = k[2]
        return AttentionShape(int(b), int(h), int(s_q), int(s_kv), int(d), "backward" in op)
    except (TypeError, ValueError, IndexError):
        return None


def _elementwise_bytes(dims: list, types: list) -> float:
    """Bytes an elementwise op moves: its tensor inputs read and an output as large as the largest written."""
    sizes = []
    for d, t in zip(dims, types + [""] * len(dims)):
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
            sizes.append(_prod(d) * _ELEMENT_BYTES.get(str(t).lower(), 0))
    return float(sum(sizes) + max(sizes)) if sizes and max(sizes) > 0 else 0.0


def group_label(args: dict) -> tuple[str, str]:
    """(process group name, description) from a collective's args (Kineto's ``Process Group Name``/
    ``Process Group Description``, Chakra's ``pg_name``/``pg_desc``), "" where absent."""
    name = args.get("Process Group Name", args.get("pg_name"))
    desc = args.get("Process Group Description", args.get("pg_desc"))
    return ("" if name is None else str(name)), ("" if desc is None else str(desc))


def is_backward(ops: Iterable[dict]) -> bool:
    """Whether a kernel launched under ``ops`` (its enclosing CPU ops) runs in the backward pass: an
    autograd node (``autograd::engine::evaluate_function: MmBackward0``, ``AddmmBackward0``) or an op
    carrying ``Fwd thread id`` (PyTorch marks the ops autograd runs for a forward op with it)."""
    for a in ops:
        n = str(a.get("name") or "")
        if "Backward" in n or n.startswith("autograd::engine") or "Fwd thread id" in (a.get("args") or {}):
            return True
    return False


def _comm_from_args(args: dict) -> tuple[str, float, int, tuple[int, ...]]:
    """(collective, full-buffer bytes, group size, group ranks) from NCCL-profiler args, where present."""
    name = str(args.get("Collective name") or "").lower()
    kind = _NCCL_KIND.get(name, name)
    nin, nout = args.get("In msg nelems"), args.get("Out msg nelems")
    esize = _ELEMENT_BYTES.get(str(args.get("dtype") or "").lower(), 0)
    nbytes = 0.0
    if isinstance(nin, (int, float)) and isinstance(nout, (int, float)) and esize:
        nbytes = float(max(nin, nout)) * esize
    try:
        size = int(args.get("Group size") or 0)
    except (TypeError, ValueError):
        size = 0
    ranks: tuple[int, ...] = ()
    pr = args.get("Process Group Ranks")
    if isinstance(pr, str):
        nums = re.findall(r"-?\d+", pr)
        ranks = tuple(int(x) for x in nums)
    elif isinstance(pr, list):
        ranks = tuple(int(x) for x in pr if isinstance(x, (int, float)))
    if not size and ranks:
        size = len(ranks)
    return kind, nbytes, size, ranks


_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")


def read_trace(path: str | Path) -> Trace:
    """Read one Kineto trace. A file that is not one, has no GPU kernels or no ``ProfilerStep#`` is a
    one-line DataError."""
    from .classify import classify, family, nccl_kind
    p = Path(path)
    doc = load_json(p)
    if isinstance(doc, list):
        events = doc
        doc = {}
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events = doc["traceEvents"]
    else:
        from .chakra import is_chakra, read_chakra
        if is_chakra(doc):
            return read_chakra(p, doc)
        raise _bad(p, "not a Kineto trace (no traceEvents list)",
                   "give a PyTorch profiler trace: prof.export_chrome_trace or tensorboard_trace_handler")
    gpu: list[dict] = []
    cpu_ops: list[dict] = []
    modules: list[dict] = []      # python_function "nn.Module: Name_N" (with_modules=True)
    launches: dict[Any, dict] = {}
    steps: list[Step] = []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = str(e.get("cat") or "")
        name = str(e.get("name") or "")
        try:
            ts, dur = float(e["ts"]), float(e.get("dur") or 0.0)
        except (KeyError, TypeError, ValueError):
            continue
        if cat.lower() in GPU_CATS:
            gpu.append(e)
        elif cat.lower() in _LAUNCH_CATS:
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                launches[c] = e
        elif cat in ("cpu_op", "user_annotation", "Operator", "python_function") or not cat:
            m = _STEP_RE.match(name)
            if cat == "python_function":
                if name.startswith("nn.Module: "):
                    modules.append(e)
            elif m and cat != "gpu_user_annotation":
                steps.append(Step(name, int(m.group(1)), ts, ts + dur))
            elif cat == "cpu_op" or cat == "Operator":
                cpu_ops.append(e)
    kernels_raw = [e for e in gpu if str(e.get("cat")).lower() == "kernel"]
    if not kernels_raw:
        raise _bad(p, "no GPU kernels in the trace", "profile with activities=[ProfilerActivity.CPU, "
                   "ProfilerActivity.CUDA] on a GPU run")
    if not steps:
        raise _bad(p, "no ProfilerStep#N annotation", "profile with torch.profiler.profile(schedule=...) and call "
                   "prof.step() once per training step")
    steps = sorted({(s.start, s.number): s for s in steps}.values(), key=lambda s: s.start)
    dist = doc.get("distributedInfo") or {}
    devs = doc.get("deviceProperties") or []
    device, device_mem = "", 0.0
    if devs and isinstance(devs[0], dict):
        device = str(devs[0].get("name") or "")
        mem = devs[0].get("totalGlobalMem")
        device_mem = float(mem) if isinstance(mem, (int, float)) else 0.0
    # which CPU ops enclose each launch: per thread, a sweep with a stack of open ops
    by_thread: dict[tuple, list[tuple[float, float, int, dict]]] = defaultdict(list)
    for e in cpu_ops + modules:
        by_thread[(e.get("pid"), e.get("tid"))].append((float(e["ts"]), float(e.get("dur") or 0.0), 0, e))
    for e in launches.values():
        by_thread[(e.get("pid"), e.get("tid"))].append((float(e["ts"]), float(e.get("dur") or 0.0), 1, e))
    ancestors: dict[Any, list[dict]] = {}
    for evs in by_thread.values():
        evs.sort(key=lambda x: (x[0], -x[1], x[2]))
        stack: list[tuple[float, dict]] = []
        for ts, dur, is_launch, e in evs:
            while stack and stack[-1][0] <= ts:
                stack.pop()
            if is_launch:
                ancestors[e["args"]["correlation"]] = [s[1] for s in stack]
            else:
                stack.append((ts + dur, e))
    ops_by_ext = {}
    for e in cpu_ops:
        x = (e.get("args") or {}).get("External id")
        if x is not None:
            ops_by_ext[x] = e
    comms_by_ext = {(e.get("args") or {}).get("External id"): e for e in cpu_ops if e.get("name") == "record_param_comms"}
    starts = [s.start for s in steps]
    kernels: list[Kernel] = []
    shapes = bool(doc.get("record_shapes")) or any("Input Dims" in (e.get("args") or {}) for e in cpu_ops[:2000])
    for e in gpu:
        args = e.get("args") or {}
        name = str(e.get("name") or "")
        cat = str(e.get("cat")).lower()
        corr = args.get("correlation")
        launch = launches.get(corr)
        t_issue = float(launch["ts"]) if launch is not None else float(e["ts"])
        i = bisect.bisect_right(starts, t_issue) - 1
        step = i if i >= 0 and t_issue <= steps[i].end else -1
        chain = list(ancestors.get(corr, [])) if corr is not None else []
        mods = [a for a in chain if a.get("cat") == "python_function"]
        chain = [a for a in chain if a.get("cat") != "python_function"]
        ext = args.get("External id")
        if not chain and ext is not None and ext in ops_by_ext and ext != corr:
            chain = [ops_by_ext[ext]]
        if cat == "kernel":
            category = classify(name)
        else:
            category = "memcpy" if cat == "gpu_memcpy" else "memset"
        k = Kernel(name=name, ts=float(e["ts"]), dur=float(e.get("dur") or 0.0),
                   stream=int(args.get("stream", e.get("tid", 0)) if str(args.get("stream", e.get("tid", 0))).lstrip("-").isdigit() else 0),
                   category=category, family=family(name, category), step=step)
        if mods:
            k.module = re.sub(r"_\d+$", "", str(mods[-1].get("name", ""))[len("nn.Module: "):])
        if cat != "kernel":
            k.bytes = float(args.get("bytes") or 0.0) * (2.0 if cat == "gpu_memcpy" and "DtoD" in name else 1.0)
        if chain:
            k.phase = "bwd" if is_backward(chain) else "fwd"
            inner = chain[-1]
            k.op = str(inner.get("name") or "")
            k.op_id = id(inner)
            for a in reversed(chain):
                an = str(a.get("name") or "")
                if category == "gemm" and an in GEMM_OPS:
                    g = gemm_shape(an, _dims(a.get("args") or {}), _types(a.get("args") or {}), name)
                    if g is not None:
                        k.gemm, k.op, k.op_id = g, an, id(a)
                        break
                if category == "attention" and an in ATTENTION_OPS:
                    k.attention = attention_shape(an, _dims(a.get("args") or {}))
                    k.op, k.op_id = an, id(a)
                    break
            if category == "elementwise" and not k.bytes:
                a = inner.get("args") or {}
                k.bytes = _elementwise_bytes(_dims(a), _types(a))
        if category in ("collective", "p2p"):
            kind, nbytes, size, ranks = _comm_from_args(args)
            k.group_name, k.group_desc = group_label(args)
            if not nbytes:
                for a in reversed(chain):
                    if a.get("name") == "record_param_comms":
                        kind2, nbytes, size, ranks = _comm_from_args(a.get("args") or {})
                        kind = kind or kind2
                        k.group_name, k.group_desc = group_label(a.get("args") or {})
                        break
                else:
                    rc = comms_by_ext.get(ext) if ext is not None else None
                    if rc is not None:
                        kind2, nbytes, size, ranks = _comm_from_args(rc.get("args") or {})
                        kind = kind or kind2
                        k.group_name, k.group_desc = group_label(rc.get("args") or {})
            k.collective = kind if kind in _NCCL_KIND.values() else nccl_kind(name)
            if k.collective == "send_recv":
                k.category = "p2p"
            k.comm_bytes, k.group_size, k.group_ranks = nbytes, size, ranks
        kernels.append(k)
    kernels.sort(key=lambda k: k.ts)
    if not any(k.step >= 0 and k.category not in ("memcpy", "memset") for k in kernels):
        raise _bad(p, "no GPU kernel was launched inside a ProfilerStep#N",
                   "profile whole steps (schedule with active >= 1) and call prof.step() each step")
    producer = "PyTorch profiler (Kineto)"
    if doc.get("schemaVersion") is not None:
        producer += f", schemaVersion {doc['schemaVersion']}"
    if dist.get("nccl_version"):
        producer += f", NCCL {dist['nccl_version']}"
    rank = dist.get("rank", 0)
    world = dist.get("world_size", 1)
    return Trace(path=str(p), producer=producer, device_name=device,
                 rank=int(rank) if isinstance(rank, int) else 0, world_size=int(world) if isinstance(world, int) else 1,
                 steps=steps, kernels=kernels, record_shapes=shapes, device_memory_bytes=device_mem)


def read_traces(paths: Iterable[str | Path]) -> list[Trace]:
    out = [read_trace(p) for p in paths]
    if not out:
        raise DataError("trace", "no trace given", "give one or more PyTorch profiler traces (.json or .json.gz)")
    return out


def finite(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
