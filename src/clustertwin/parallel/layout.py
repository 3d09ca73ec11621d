"""The parallel layout of a plan: its degrees, the sizes derived from them, the process groups and
where they sit on the nodes, and the split of the layers over the pipeline chunks.

Rank order is Megatron's: tp innermost, then cp, then dp, then pp outermost. The experts of an MoE
layer fold onto the tp x cp x dp ranks of a stage as etp (innermost) x ep x edp (Megatron-Core's
MoE parallel folding, Liu et al. 2025, arXiv 2504.14960): the expert tensor-parallel size ``etp``
defaults to ``tp``, the expert data-parallel size is what remains, ``tp*cp*dp / (ep*etp)``.

Every size here works on ints (one plan) and, element by element, on numpy arrays (the search's
candidate plans).

>>> d = ParallelDims(tp=8, pp=4, cp=2, dp=4, ep=8, etp=1)
>>> (d.world_size, d.dp_cp, d.expert_tp, d.expert_dp)
(256, 8, 1, 8)
>>> place_group(16, 1, 8)          # a group of 16 consecutive ranks on nodes of 8 GPUs
GroupPlacement(size=16, ranks_per_node=8, nodes=2, node_span=2)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..arith import maximum, where
from ..errors import PlanError


@dataclass(frozen=True)
class GroupPlacement:
    size: int
    ranks_per_node: int
    nodes: int
    node_span: int          # how many consecutive nodes the group's members are spread over


def place_group(size: int, stride: int, gpus_per_node: int) -> GroupPlacement:
    """Placement of a group of ``size`` ranks, ``stride`` ranks apart, on nodes of ``gpus_per_node``."""
    if size <= 1:
        return GroupPlacement(1, 1, 1, 1)
    if stride * size <= gpus_per_node:
        return GroupPlacement(size, size, 1, 1)
    if stride >= gpus_per_node:
        span = max(1, (stride * (size - 1)) // gpus_per_node + 1)
        return GroupPlacement(size, 1, size, span)
    per_node = max(1, gpus_per_node // stride)
    nodes = math.ceil(size / per_node)
    return GroupPlacement(size, per_node, nodes, nodes)


def expert_dp_size(tp: Any, cp: Any, dp: Any, ep: Any, etp: Any) -> Any:
    """Expert data-parallel size: the ranks of tp x cp x dp not used by ep x etp (ints or arrays)."""
    return maximum(1, tp * cp * dp // (ep * etp))


@dataclass(frozen=True)
class ParallelDims:
    """The degrees of a plan (ints, or numpy arrays of many plans) and the sizes derived from them.
    ``dp`` is resolved (never None); ``etp`` None means tp."""

    tp: Any = 1
    pp: Any = 1
    vpp: Any = 1
    cp: Any = 1
    dp: Any = 1
    ep: Any = 1
    etp: Any = None

    @classmethod
    def of(cls, plan: Any) -> "ParallelDims":
        """The degrees of a plan (a Plan with dp resolved, or anything with the same attributes)."""
        dp = getattr(plan, "dp", 1)
        if dp is None:
            raise PlanError("plan.dp", "the plan's data-parallel size is not resolved yet",
                            "check the plan against its cluster first (check_plan / make_job)")
        return cls(plan.tp, getattr(plan, "pp", 1), getattr(plan, "vpp", 1), getattr(plan, "cp", 1), dp,
                   getattr(plan, "ep", 1), getattr(plan, "etp", None))

    @property
    def dp_cp(self) -> Any:
        """Ranks that hold the same dense weights: the data-parallel group with CP folded in."""
        return self.dp * self.cp

    @property
    def model_parallel(self) -> Any:
        return self.tp * self.pp * self.cp

    @property
    def world_size(self) -> Any:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def expert_tp(self) -> Any:
        """Expert tensor-parallel size: etp, else tp (Megatron-Core's default)."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_dp(self) -> Any:
        return expert_dp_size(self.tp, self.cp, self.dp, self.ep, self.expert_tp)

    def group_shapes(self) -> dict[str, tuple[Any, Any]]:
        """(size, stride) of each process group in Megatron's rank order (tp, cp, dp, pp)."""
        tp, cp, dp, ep, etp = self.tp, self.cp, self.dp, self.ep, self.expert_tp
        return {
            "tp": (tp, 1),
            "cp": (cp, tp),
            "dp_cp": (dp * cp, tp),
            # experts fold onto tp x cp x dp as etp (innermost) x ep x edp (Megatron-Core parallel folding)
            "ep": (ep, etp),
            "edp": (self.expert_dp, etp * ep),
            # one pipeline send/recv: two neighbouring stages, a stage's tp*cp*dp ranks apart
            "pp": (where(self.pp > 1, 2, 1), tp * cp * dp),
        }

    def placements(self, gpus_per_node: int) -> dict[str, GroupPlacement]:
        """Where each process group sits on nodes of ``gpus_per_node`` GPUs (ints only)."""
        return {name: place_group(size, stride, gpus_per_node) for name, (size, stride) in self.group_shapes().items()}


def expert_tp(plan: Any) -> Any:
    """Expert tensor-parallel size of a plan: its etp, else tp (Megatron-Core's default)."""
    return ParallelDims(plan.tp, etp=getattr(plan, "etp", None)).expert_tp


def expert_dp(plan: Any) -> Any:
    """Expert data-parallel size of a plan (dp resolved): the ranks of tp x cp x dp not used by ep x etp."""
    return ParallelDims.of(plan).expert_dp


def group_placements(plan: Any, gpus_per_node: int) -> dict[str, GroupPlacement]:
    """Where each process group of a plan sits (Megatron rank order: tp, cp, dp, pp)."""
    return ParallelDims.of(plan).placements(gpus_per_node)


def stage_layer_split(num_layers: int, pp: int, vpp: int, first: int | None = None,
                      last: int | None = None) -> list[int]:
    """Transformer layers per virtual stage (pp*vpp chunks, in pipeline order).

    Even split when the layers divide; otherwise as even as possible with the spare layers on the
    middle chunks, since the first and last chunks also hold the embedding and the loss. This is
    the split Llama 3 and NeMo use when the layers plus two divide (first and last chunk one layer
    fewer), and what torch pipelining and Megatron-Core's pipeline layouts give otherwise. A plan is
    rejected only when a chunk would get no layer. ``first``/``last`` set the first and last chunks
    explicitly (Megatron-Core's --decoder-first/last-pipeline-num-layers) and the chunks between
    them share the rest evenly.

    >>> stage_layer_split(10, 4, 1)
    [2, 3, 3, 2]
    """
    chunks = pp * vpp
    if first is not None or last is not None:
        f, l = first or 0, last or 0
        middle = chunks - (first is not None) - (last is not None)
        rest = num_layers - f - l
        if middle <= 0 or rest <= 0 or rest % middle:
            raise PlanError("plan.first_stage_layers",
                            f"{num_layers} layers less first={first}, last={last} do not split evenly over the "
                            f"other {max(middle, 0)} of {pp}*{vpp} pipeline chunks",
                            "choose first/last stage layers leaving a multiple of the remaining chunks")
        split = [rest // middle] * chunks
        if first is not None:
            split[0] = f
        if last is not None:
            split[-1] = l
        return split
    if num_layers < chunks:
        raise PlanError("plan.pp", f"{num_layers} layers cannot fill pp*vpp = {pp}*{vpp} = {chunks} pipeline chunks",
                        "choose pp*vpp at most the number of layers")
    base, spare = divmod(num_layers, chunks)
    split = [base] * chunks
    for i in (list(range(1, chunks - 1)) + [0, chunks - 1])[:spare]:   # middle chunks first
        split[i] += 1
    return split
