"""Price collectives on the topology.

Groups are placed by Megatron's rank order (tp innermost, then cp, then dp, then pp;
``parallel/layout.py`` places them): a group is described by its size and the stride between its
ranks, which decides how many of its ranks share a node and how many nodes it spans. Ring algorithms (NCCL) move 2(n-1)/n of the buffer for
all-reduce and (n-1)/n for all-gather / reduce-scatter / all-to-all. A ring spanning nodes crosses
each node boundary once per channel: with g ranks per node, the ring's inter-node bandwidth is the
NIC bandwidth of those g GPUs (g x per-GPU NIC), capped by NVLink. Traffic between leaf switches
pays the fat-tree's oversubscription. Latency: per ring step, or per tree level for large groups.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..parallel.layout import GroupPlacement
from ..specs.hardware import ClusterSpec
from .profile import HardwareProfile


_BUS_FACTOR = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}


def expected_target_nodes(top_k: int, nodes: int, groups: int = 0, topk_groups: int = 0) -> float:
    """Expected number of distinct nodes holding a token's ``top_k`` experts, the experts spread
    evenly over ``nodes`` nodes and picked uniformly. Group-limited routing (DeepSeek-V3: the experts
    of ``groups`` groups, a token's taken from its best ``topk_groups``) confines them to the nodes of
    those groups: with one group per node, at most ``topk_groups`` nodes (DeepSeek-V3 Sec. 2.1.2)."""
    reach = nodes
    if groups and 0 < topk_groups < groups:
        reach = min(nodes, topk_groups * max(1, nodes // groups))
    return reach * (1.0 - (1.0 - 1.0 / reach) ** top_k)


def ring_time(bus_factor, nbytes, bandwidth, latency):
    """Seconds of a ring collective (floats or arrays): bus factor x buffer / bus bandwidth + latency."""
    return bus_factor * nbytes / bandwidth + latency


class NetworkPricer:
    def __init__(self, cluster: ClusterSpec, profile: HardwareProfile):
        self.cluster = cluster
        node = cluster.node
        self.G = node.gpus_per_node
        self.nvlink = node.gpu_scaleup_bandwidth * profile.nvlink_efficiency
        if node.scaleup_fabric == "pcie":
            self.nvlink = min(self.nvlink, node.gpu.pcie_bandwidth_bytes_per_s * profile.nvlink_efficiency)
        self.nic_per_gpu = node.nic_bandwidth_per_gpu * profile.nic_efficiency
        self.nodes_per_leaf = cluster.nodes_per_leaf

    def _taper(self, pl: GroupPlacement) -> float:
        if pl.node_span > self.nodes_per_leaf:
            return self.cluster.oversubscription
        return 1.0

    def bandwidth(self, pl: GroupPlacement, kind: str) -> float:
        if pl.nodes == 1:
            return self.nvlink
        nic = self.nic_per_gpu / self._taper(pl)
        if kind == "send_recv":
            return nic
        return min(self.nvlink, pl.ranks_per_node * nic)

    def latency(self, pl: GroupPlacement, kind: str) -> float:
        n = pl.size
        alpha = self.cluster.inter_node_latency_s if pl.nodes > 1 else self.cluster.intra_node_latency_s
        if kind == "send_recv":
            return alpha
        ring_steps = (2 if kind == "all_reduce" else 1) * (n - 1)
        tree_steps = (2 if kind == "all_reduce" else 1) * (math.ceil(math.log2(n)) + 1)
        return alpha * min(ring_steps, tree_steps)

    def time(self, kind: str, nbytes: float, pl: GroupPlacement, node_dedup: tuple[int, ...] | None = None) -> float:
        """Seconds for one collective of ``nbytes`` per rank on a group placed as ``pl``.

        An all-to-all spanning nodes moves the share bound for other nodes over the rank's NIC and
        the rest over NVLink, both at once. With ``node_dedup`` = (top_k, groups, groups per token)
        the MoE dispatch sends each token once per target node over the NICs and fans it out over
        NVLink there (DeepSeek-V3 Sec. 3.2.2; DeepEP): the NIC share shrinks by expected target
        nodes / top_k and NVLink carries every copy."""
        n = pl.size
        if n <= 1 or nbytes <= 0:
            return 0.0
        if kind == "all_to_all" and pl.nodes > 1:
            g = pl.ranks_per_node
            nic = self.nic_per_gpu / (self.cluster.oversubscription if pl.nodes > self.nodes_per_leaf else 1.0)
            inter = nbytes * (n - g) / n / nic
            if node_dedup:
                top_k, groups, topk_groups = node_dedup
                inter *= min(1.0, expected_target_nodes(top_k, pl.nodes, groups, topk_groups) / top_k)
                intra = nbytes * (g - 1) / g / self.nvlink
            else:
                intra = nbytes * (g - 1) / n / self.nvlink
            return max(intra, inter) + self.latency(pl, kind)
        return ring_time(_BUS_FACTOR[kind](n), nbytes, self.bandwidth(pl, kind), self.latency(pl, kind))

    def time_many(self, kind: str, nbytes: np.ndarray, placements: Sequence[GroupPlacement],
                  index: np.ndarray) -> np.ndarray:
        """``time`` of many collectives at once: collective r moves ``nbytes[r]`` on ``placements[index[r]]``
        (the same arithmetic, element by element). Ring collectives only (no inter-node all-to-all)."""
        terms = np.zeros((len(placements), 4))
        for j, pl in enumerate(placements):
            if kind == "all_to_all" and pl.nodes > 1:
                raise ValueError("time_many prices ring collectives; use time() for an inter-node all-to-all")
            n = pl.size
            terms[j] = (_BUS_FACTOR[kind](n), self.bandwidth(pl, kind), self.latency(pl, kind), n)
        factor, bandwidth, latency, size = terms[index].T
        t = ring_time(factor, nbytes, bandwidth, latency)
        return np.where((size > 1) & (nbytes > 0), t, 0.0)
