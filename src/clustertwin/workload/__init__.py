"""The symbolic tensor graph of one training iteration: the one source of truth for pricing,
search, trace export and simulation."""
from .ops import Op, OpKind, Phase, Stream
from .graph import StageGraph, WorkloadGraph, build_graph

__all__ = ["Op", "OpKind", "Phase", "Stream", "StageGraph", "WorkloadGraph", "build_graph"]
