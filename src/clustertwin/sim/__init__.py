"""Discrete-event replay of one training iteration of the workload graph (``clustertwin sim``):
per-rank streams, dependencies, collectives that wait for their whole group, shared links, and
Megatron's pipeline schedules. See docs/trace.md."""
from .replay import SimRank, SimResult, simulate

__all__ = ["SimRank", "SimResult", "simulate"]
