"""Ops of the workload graph. One Op is one kernel or one collective on one rank, for one
micro-batch (or once per iteration for DP and optimizer ops), with everything needed to price it."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class OpKind(str, Enum):
    GEMM = "gemm"            # dense matmul (shape m, n, k; batch)
    ATTENTION = "attention"  # fused attention core (flash)
    ELEMENTWISE = "elementwise"  # memory-bound: norms, activations, softmax, residuals, casts
    EMBEDDING = "embedding"
    OPTIMIZER = "optimizer"
    COLLECTIVE = "collective"
    P2P = "p2p"


class Phase(str, Enum):
    FWD = "fwd"
    BWD = "bwd"
    RECOMPUTE = "recompute"
    STEP = "step"            # once per iteration (DP sync, optimizer)


class Stream(str, Enum):
    """The stream an op runs on (a thread in the Perfetto timeline)."""
    COMPUTE = "compute"
    TP = "tp_comm"
    CP = "cp_comm"
    EP = "ep_comm"
    DP = "dp_comm"
    PP = "pp_comm"


def element_bytes(dtype: str) -> int:
    """Bytes of one GEMM operand element in ``dtype`` (FP8/FP4 operands are stored a byte each)."""
    return {"fp8": 1, "fp4": 1, "fp32": 4, "tf32": 4}.get(dtype, 2)


def is_score_gemm(name: str) -> bool:
    """The batched attention-score GEMMs of unfused attention (attn.qk, attn.av and their gradients),
    not the QKV projection."""
    return name.split(".")[:2] in (["attn", "qk"], ["attn", "av"])


@dataclass(frozen=True, slots=True)
class Op:
    """One kernel or collective.

    ``flops`` and ``bytes`` are per execution on this rank; ``comm_bytes`` is the collective's
    message size per rank (the full buffer: for all-gather the gathered output, for reduce-scatter
    the unreduced input, for all-reduce the buffer). ``group`` names the process group
    (tp, cp, dp, dp_cp, ep, pp); ``count`` repeats the op (e.g. batched attention heads are one op).
    ``kernels`` is how many kernels the framework launches for it (an eager composite norm is several):
    the host's time to issue them bounds the stream when the GPU work is shorter.
    """

    name: str
    kind: OpKind
    phase: Phase
    flops: float = 0.0
    bytes: float = 0.0
    shape: tuple[int, ...] = ()
    dtype: str = "bf16"
    collective: str = ""     # all_reduce | all_gather | reduce_scatter | all_to_all | send_recv
    group: str = ""
    comm_bytes: float = 0.0
    overlappable: bool = False
    layer: str = ""          # "layer", "moe_layer", "embedding", "head", "step"
    extra: dict = field(default_factory=dict, compare=False, hash=False)
    kernels: int = 1         # kernel launches the op stands for (the host issues each one)

    @property
    def stream(self) -> Stream:
        if self.kind in (OpKind.COLLECTIVE, OpKind.P2P):
            return {"tp": Stream.TP, "cp": Stream.CP, "ep": Stream.EP, "pp": Stream.PP}.get(self.group, Stream.DP)
        return Stream.COMPUTE

    @property
    def is_comm(self) -> bool:
        return self.kind in (OpKind.COLLECTIVE, OpKind.P2P)
