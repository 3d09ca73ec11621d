"""Price collectives on the topology, as NCCL prices them.

Groups are placed by Megatron's rank order (tp innermost, then cp, then dp, then pp;
``parallel/layout.py`` places them): a group is described by its size, how many of its ranks share
a node and how many nodes it spans.

A collective's time is that of the fastest (algorithm, protocol) pair NCCL offers for it, each
priced as NCCL's own cost model prices it (NVIDIA/nccl ``src/graph/tuning.cc``, ncclTopoTuneModel
and ncclTopoGetAlgoTime): ``time = latency + bytes / algorithm bandwidth``.

* Protocols: **Simple** runs at the link's bus bandwidth with the highest per-step latency,
  **LL128** at 0.92 of it, **LL** at half of it (capped) with the lowest latency: small messages
  take LL, large ones Simple.
* **Ring** (every collective): all-reduce takes 2(n-1) steps, all-gather / reduce-scatter n-1;
  the steps crossing nodes (2(N-1) or N-1 over N nodes) pay the network latency, the rest NVLink's.
  A ring spanning nodes crosses each node boundary once per channel: with g ranks per node its
  inter-node bus bandwidth is the NIC bandwidth of those g GPUs, capped by NVLink. Each loop of a
  ring also runs one step that moves nothing over the link, one after the other with the rest on the
  channel's thread block: with P2P read (Ampere over NVLink) step 0 copies the rank's chunk into its own
  FIFO, with P2P write the last step copies the FIFO into the output (NVIDIA/nccl all_reduce.h runRing,
  paths.cc, p2p.cc). The ranks run the ring in lockstep, so the links wait for it: the rank's 1/n of
  the buffer read and written once at the GPU's memory bandwidth, a term NCCL's cost model leaves out.
  It is what makes a 2-GPU A100 ring reach ~200 GB/s bus bandwidth where 8 GPUs reach ~230.
* **Tree** (all-reduce across nodes): a chain inside each node and a double binary tree between
  nodes, 2 (ranks per node - 1) NVLink steps and 2 log2(N) network steps; each node sends and
  receives 2(N-1)/N of the buffer over its NICs (the whole buffer at N = 2, where a ring sends
  nearly twice that), and each GPU of the chain sends the buffer up and down through its one
  NVSwitch port (half the link each way: NCCL's tree ratio .5). At mid sizes its bandwidth is
  NCCL's corrected one (tuning.cc treeCorrectionFactor, per protocol and power of two of the size: 0.4-0.9
  from 1 KiB to 256 MiB; ``tree_correction``).
* **NVLS** (NVLink SHARP, all-reduce inside a Hopper/Blackwell NVSwitch node) and **NVLS tree**
  (across nodes): the switch reduces, at the measured NVLS bandwidth. NCCL runs them as a pipeline of
  chunks (``nvls_chunk_bytes``): nChannels x nHeads lanes, each a chunk at a time, the chunk cut from
  128 KiB to 16-64 KiB below ~1 GiB (NVIDIA/nccl ``src/enqueue.cc`` calcCollChunking). A chunk passes
  scatter, NVLS reduce and multicast, gather (and on NVLS tree the network hops up and down the tree)
  one stage after the other (``src/device/all_reduce.h``), so a message of L rounds takes L + stages
  - 1 round times. The fastest row wins with its fill counted (NCCL's own cost model has no such
  term; the model assumes NCCL's pick is the fastest, so that more bandwidth is never slower).
* **PAT** (all-gather / reduce-scatter with one rank per node, NCCL 2.23+): log-depth latency
  plus a linear term, at 0.75 of the ring's bandwidth.
* **Broadcast**: NCCL runs it as a pipelined ring only; every rank receives the buffer once
  (bus factor 1), and a message's first bytes cross the ring's n - 1 hops.
* **CollNet** (all-reduce across nodes of a cluster whose switches reduce, InfiniBand SHARP with
  NCCL_COLLNET_ENABLE): each node sends its buffer up once and receives the reduced one once, half
  a ring's network traffic. CollNet Direct scatters and gathers the buffer over NVLink so that each
  GPU's NIC carries 1/ranks per node of it; CollNet Chain runs the tree's NVLink chain. The same
  switches let NVLS span nodes (NVLS + SHARP).

A network plugin's reported latency (the node's ``net_plugin_latency_s``: aws-ofi-nccl's 75 us on EFA) is
added to every network step, twice for Simple, as NCCL's tuning.cc adds it. A network plugin may leave NCCL
fewer protocols: aws-ofi-nccl sets Simple only (NCCL_PROTO=simple, for
every communicator of the process) on EFA that does not deliver 128-byte lines in order (p4d/p4de; the
node's ``nic_ordered_128b_delivery: false``); ``NetworkPricer(..., protocols=...)`` takes an explicit
NCCL_PROTO on top. On nodes whose GPUs reach each other over PCIe only, NCCL leaves LL128 off unless
NCCL_PROTO names it (tuning.cc: LL128 on by default only over NVLink). A job's NCCL_ALGO (``NetworkPricer(..., algorithms=...)``) leaves NCCL the algorithms
it names, as NCCL applies it: the ring of collectives other than all-reduce always stays (src/graph/tuning.cc
'Never disable ring for non-allreduce operations'). On two nodes this matters most: a ring sends 2(n-1)/n of
the buffer over each node's NICs each way, a tree the buffer once, so a run with NCCL_ALGO=Ring (aws-efa-eks's
p4d nccl-tests job) reaches about half the tree's bus bandwidth.

Inside a node, a switch (NVSwitch) gives a GPU its whole port whatever the group; a full mesh (AMD xGMI,
the node's ``scaleup_topology``) gives a group of g GPUs of the node only the g - 1 links joining them
(one link per peer), and a send one link (``scaleup``).

Traffic between leaf switches pays the fat-tree's oversubscription (per tier where the cluster
gives ``tier_oversubscription``: the product of the tiers a group climbs), and each switch tier
beyond the leaf adds two hops to every network step (tiers from the group's node span,
``nodes_per_pod`` and the switch radix). A **rail-only** network (Wang et al. 2023, arXiv
2307.12169) has no switch between rails: an all-to-all forwards the share bound for another rail
over NVLink first. On a **torus** (TPU-like, ``torus_dims``) a group's nodes form a slice; the
slice's rings wrap around where it spans a whole dimension or whole optical-circuit-switch blocks
(``ocs_block``), and a node drives two links per wrapped dimension and one per open one; an
all-to-all is bounded by the slice's bisection (docs/cluster.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..constants import group, value
from ..errors import SpecError
from ..parallel.layout import GroupPlacement
from ..specs.hardware import ClusterSpec
from .profile import HardwareProfile, architecture_of


BUS_FACTOR = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
}
COLLECTIVES = tuple(BUS_FACTOR)

PROTOCOLS = ("ll", "ll128", "simple")
ALGORITHMS = ("ring", "tree", "nvls", "nvls_tree", "pat", "collnet_direct", "collnet_chain")
_RING, _TREE_ALGO, _NVLS, _NVLS_TREE, _PAT, _COLLNET_DIRECT, _COLLNET_CHAIN = (ALGORITHMS.index(a) for a in ALGORITHMS)
# what ``--algorithm`` names (NCCL_ALGO's families): the menu's algorithms each stands for
ALGORITHM_FAMILIES = {"ring": ("ring",), "tree": ("tree",), "nvls": ("nvls", "nvls_tree"), "pat": ("pat",),
                      "collnet": ("collnet_direct", "collnet_chain")}
_FAMILY_NEEDS = {
    "ring": "every collective but all-to-all and send/recv runs it",
    "tree": "all-reduce across nodes of a switched network (the model has no one-node tree)",
    "nvls": "all-reduce on NVSwitch nodes of Hopper or later; across nodes NVLS tree (or NVLS with "
            "in_network_reduction)",
    "pat": "all-gather or reduce-scatter with one rank per node across nodes",
    "collnet": "all-reduce across nodes of a cluster with in_network_reduction: true (InfiniBand SHARP)",
}
# columns of a menu row: latency, seconds per byte, algorithm, protocol, and for NCCL's chunked NVLS
# pipelines: concurrent chunk lanes (nChannels x nHeads; 0: none), rounds of pipeline fill (stages - 1),
# the largest chunk (bytes)
_COLS = 7
_LAT_COL, _INV_COL, _ALG_COL, _PROTO_COL, _OPS_COL, _FILL_COL, _CHUNK_COL = range(_COLS)
_NO_PIPE = (0.0, 0.0, 0.0)
# NVIDIA/nccl src/enqueue.cc calcCollChunking (commit 5067397c): the chunk drops to `size` while the
# message is below `mult` x lanes x chunk (NVLS: 64x -> 64 KiB, 8x -> 32 KiB, 2x -> 16 KiB; NVLS tree:
# 32x -> 256 KiB, 16x -> 128 KiB, 4x -> 64 KiB, 1x -> 32 KiB)
def _cuts(kind: str) -> tuple[tuple[float, float], ...]:
    """(multiple, chunk bytes) of NCCL's chunk cuts, largest first (constants nccl.nvls_cut.KIND.I.*)."""
    cuts: list[tuple[float, float]] = []
    while True:
        try:
            i = len(cuts)
            cuts.append((value(f"nccl.nvls_cut.{kind}.{i}.multiple"), value(f"nccl.nvls_cut.{kind}.{i}.chunk_bytes")))
        except KeyError:
            return tuple(cuts)


class _Sm100Tuning:
    """NCCL's Blackwell NVLS tree tuning figures (constants nccl.nvls_sm100.*), read by name."""

    def __getitem__(self, name: str) -> float:
        return value(f"nccl.nvls_sm100.{name}")


_NVLS_CUTS = _cuts("flat")
_NVLS_TREE_CUTS = _cuts("tree")


def _lat(tier: str, algo: str, proto: str) -> float:
    return value(f"nccl.latency.{tier}.{algo}.{proto}")


_LL = value("nccl.ll_bandwidth_factor")
_LL128 = value("nccl.ll128_bandwidth_factor")
_TREE = value("nccl.tree_bandwidth_factor")
_TREE_PROTO = {"ll": value("nccl.tree_ll_bandwidth_factor"), "ll128": value("nccl.tree_ll128_bandwidth_factor"),
               "simple": 1.0}
_PAT_BW = value("nccl.pat_bandwidth_factor")
_PAT_PER_RANK = value("nccl.pat_latency_per_rank_s")
_PAT_LOG_DIV = value("nccl.pat_log_latency_divisor")
_NET_OVERHEAD = value("nccl.net_overhead_s")
_NET_OVERHEAD_SIMPLE = value("nccl.net_overhead_simple_factor")
_PLATEAU = value("nccl.ring_simple_plateau")
_LOCAL_COPY = value("nccl.ring_local_copy_bytes_per_byte")
_SWITCH_RADIX = value("cluster.switch_radix")
_HOP = value("cluster.switch_hop_latency_s")
_COLLNET_ARITY = value("nccl.collnet_arity_latency_s")
_COLLNET_HOPPER = value("nccl.collnet_direct_efficiency.hopper")
_NVLS_STAGES = int(value("nccl.nvls_pipeline_stages"))
# NCCL's tree correction (tuning.cc treeCorrectionFactor): a factor on the tree all-reduce's bandwidth per
# protocol (rows: PROTOCOLS) and per power of two of bytes / 64 (columns); sizes beyond the table: 1
_TREE_CORRECTION = np.array([[value(f"nccl.tree_correction.{p}.{i}") for i in range(len(group(f"nccl.tree_correction.{p}")))]
                             for p in PROTOCOLS])
_TREE_CORRECTION_UNIT = value("nccl.tree_correction_unit_bytes")


def tree_correction(nbytes, proto):
    """NCCL's factor on a tree all-reduce's bandwidth for a message of ``nbytes`` with protocol index
    ``proto`` (NVIDIA/nccl src/graph/tuning.cc ncclTopoGetAlgoTime: treeCorrectionFactor[proto][log2i(bytes >> 6)]
    below 2^23 x 64 B = 512 MiB; 1 outside it). Floats or arrays."""
    b = np.asarray(nbytes, dtype=float)
    idx = np.frexp(np.maximum(b, 1.0) / _TREE_CORRECTION_UNIT)[1] - 1      # floor(log2), exact
    inside = (b >= _TREE_CORRECTION_UNIT) & (idx < _TREE_CORRECTION.shape[1])
    p = np.asarray(proto, dtype=int)
    out = np.where(inside, _TREE_CORRECTION[p, np.clip(idx, 0, _TREE_CORRECTION.shape[1] - 1)], 1.0)
    return float(out) if out.ndim == 0 else out


def _tree_correction_one(nbytes: float, proto: int) -> float:
    """``tree_correction`` of one message in plain floats."""
    if nbytes < _TREE_CORRECTION_UNIT:
        return 1.0
    idx = math.frexp(nbytes / _TREE_CORRECTION_UNIT)[1] - 1
    return float(_TREE_CORRECTION[proto, idx]) if idx < _TREE_CORRECTION.shape[1] else 1.0
_NVLS_TREE_STAGES_PER_LEVEL = int(value("nccl.nvls_tree_stages_per_level"))


@dataclass(frozen=True)
class CollectiveEstimate:
    """One collective as the model prices it: NCCL's pick (or the forced algorithm), its time and
    nccl-tests' bandwidths (algbw = bytes / time, busbw = algbw x the op's bus factor), and the two
    tiers it crosses. ``nbytes`` is nccl-tests' "size": the buffer per rank of an all-reduce or
    broadcast, the whole gathered buffer of an all-gather / reduce-scatter, a rank's send buffer of
    an all-to-all."""
    op: str
    nbytes: float
    num_gpus: int
    nodes: int
    ranks_per_node: int
    algorithm: str
    protocol: str
    time_s: float
    latency_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    intra: dict | None
    inter: dict | None

    def to_json(self) -> dict:
        return {"op": self.op, "bytes": int(self.nbytes), "num_gpus": self.num_gpus, "nodes": self.nodes,
                "ranks_per_node": self.ranks_per_node, "algorithm": self.algorithm, "protocol": self.protocol,
                "time_s": self.time_s, "latency_s": self.latency_s, "algbw_bytes_per_s": self.algbw_bytes_per_s,
                "busbw_bytes_per_s": self.busbw_bytes_per_s, "phases": {"intra": self.intra, "inter": self.inter}}


def expected_target_nodes(top_k: int, nodes: int, groups: int = 0, topk_groups: int = 0) -> float:
    """Expected number of distinct nodes holding a token's ``top_k`` experts, the experts spread
    evenly over ``nodes`` nodes and picked uniformly. Group-limited routing (DeepSeek-V3: the experts
    of ``groups`` groups, a token's taken from its best ``topk_groups``) confines them to the nodes of
    those groups: with one group per node, at most ``topk_groups`` nodes (DeepSeek-V3 Sec. 2.1.2)."""
    reach = nodes
    if groups and 0 < topk_groups < groups:
        reach = min(nodes, topk_groups * max(1, nodes // groups))
    return reach * (1.0 - (1.0 - 1.0 / reach) ** top_k)


def torus_slice(cluster: ClusterSpec, nodes: int) -> list[tuple[int, bool]]:
    """(extent, wraps around) of each dimension of the slice ``nodes`` consecutive nodes of a torus
    cluster form: the first dimension filled first. A dimension wraps where the slice spans all of
    it, or, with optical circuit switches, a whole number of blocks (the switches close the ring:
    Jouppi et al., ISCA 2023, TPU v4 slices of 4x4x4 cubes)."""
    dims, blocks = cluster.torus_dims, cluster.ocs_block or ()
    out, reach = [], 1
    for i, d in enumerate(dims):
        extent = max(1, min(d, math.ceil(nodes / reach)))
        wraps = extent > 2 and (extent == d or (bool(blocks) and extent % blocks[i] == 0))
        out.append((extent, wraps))
        reach *= d
    return out


def ring_time(bus_factor, nbytes, bandwidth, latency):
    """Seconds of a ring collective (floats or arrays): bus factor x buffer / bus bandwidth + latency."""
    return bus_factor * nbytes / bandwidth + latency


def _log2i(x: int) -> int:
    return max(0, int(x).bit_length() - 1)


def nvls_chunk_bytes(nbytes, lanes, max_chunk, tree):
    """The chunk NCCL's NVLS (``tree`` False) or NVLS tree (``tree`` True) all-reduce cuts a message of
    ``nbytes`` into, with ``lanes`` = nChannels x nHeads chunks in flight and ``max_chunk`` its largest
    chunk (NVIDIA/nccl src/enqueue.cc calcCollChunking: smaller chunks for smaller messages, so that
    every lane gets several). Floats or arrays (``tree`` may be an array too)."""
    def cut(cuts):
        c = np.asarray(max_chunk, dtype=float) + 0.0 * np.asarray(nbytes, dtype=float)
        for mult, size in cuts:
            c = np.where((nbytes < mult * lanes * c) & (c > size), float(size), c)
        return c
    out = np.where(tree, cut(_NVLS_TREE_CUTS), cut(_NVLS_CUTS))
    return float(out) if out.ndim == 0 else out


def _fill_one(nbytes: float, inv: float, lanes: float, fill_rounds: float, max_chunk: float, tree: bool) -> float:
    """``pipeline_fill_s`` of one message, in plain floats (the step model prices many one at a time)."""
    c = max_chunk
    for mult, size in (_NVLS_TREE_CUTS if tree else _NVLS_CUTS):
        if nbytes < mult * lanes * c and c > size:
            c = size
    return fill_rounds * min(nbytes, lanes * c) * inv


def pipeline_fill_s(nbytes, inv, lanes, fill_rounds, max_chunk, tree):
    """Seconds a chunked NVLS pipeline takes beyond bytes / bandwidth: ``fill_rounds`` (stages - 1) more
    rounds of lanes x chunk bytes (the whole message where it is less than one round) at the
    algorithm's ``inv`` seconds per byte. Zero where ``lanes`` is 0 (a row without a chunk pipeline)."""
    lanes_arr = np.asarray(lanes, dtype=float)
    chunk = nvls_chunk_bytes(nbytes, np.maximum(lanes_arr, 1.0), max_chunk, tree)
    out = np.where(lanes_arr > 0, fill_rounds * np.minimum(nbytes, lanes_arr * chunk) * inv, 0.0)
    return float(out) if out.ndim == 0 else out


class NetworkPricer:
    def __init__(self, cluster: ClusterSpec, profile: HardwareProfile, protocols: Sequence[str] | None = None,
                 algorithms: Sequence[str] | None = None):
        """``protocols``: the NCCL protocols the fabric allows (NCCL_PROTO; None: all three). A network
        plugin that cannot guarantee 128-byte ordered delivery restricts NCCL to Simple (aws-ofi-nccl on
        EFA without in-order 128-byte writes: src/platform-aws.cpp sets NCCL_PROTO=simple).
        ``algorithms``: the algorithm families a job's NCCL_ALGO leaves NCCL (names of ALGORITHM_FAMILIES;
        None: all). As NCCL applies it (src/graph/tuning.cc ncclTopoTuneModel: 'Never disable ring for
        non-allreduce operations'), it removes the others from every collective but keeps the ring of
        collectives other than all-reduce; NCCL_NVLS_ENABLE=0 is the same as leaving nvls out.
        Where either is None, the cluster's ``nccl_env`` (a cluster file's NCCL_ALGO, NCCL_PROTO,
        NCCL_NVLS_ENABLE, parsed as NCCL parses them: specs/nccl.py) gives it; its algorithms are NCCL's
        own (NVLS without NVLS tree, CollNetDirect without CollNetChain)."""
        self.cluster = cluster
        env = cluster.nccl_env
        self._algo_field, self._proto_field = "algorithms", "protocols"
        bad = [a for a in (algorithms or ()) if a not in ALGORITHM_FAMILIES]
        if bad or (algorithms is not None and not algorithms):
            raise SpecError("algorithms", f"unknown or empty NCCL algorithm list {list(algorithms or ())!r}",
                            f"name one or more of {', '.join(ALGORITHM_FAMILIES)}")
        self.algorithms = None if algorithms is None else tuple(algorithms)
        self._allowed_algos = None if algorithms is None else \
            {ALGORITHMS.index(a) for fam in algorithms for a in ALGORITHM_FAMILIES[fam]}
        if algorithms is None and env is not None and env.algorithms is not None:
            self.algorithms = env.algorithms
            self._allowed_algos = {ALGORITHMS.index(a) for a in env.algorithms}
            self._algo_field = "NCCL_ALGO"
        if protocols is None and env is not None and env.protocols is not None:
            protocols = env.protocols
            self._proto_field = "NCCL_PROTO"
        unknown = [p for p in (protocols or ()) if p not in PROTOCOLS]
        if unknown or (protocols is not None and not protocols):
            raise SpecError("protocols", f"unknown or empty NCCL protocol list {list(protocols or ())!r}",
                            f"name one or more of {', '.join(PROTOCOLS)}")
        node = cluster.node
        allowed = tuple(PROTOCOLS) if protocols is None else tuple(protocols)
        if protocols is None and node.scaleup_fabric == "pcie" and node.gpu.vendor.lower() != "amd":
            # NCCL leaves LL128 off unless NCCL_PROTO names it where GPUs reach each other over PCIe only:
            # LL128 is on by default only where the intra-node path is NVLink (src/graph/tuning.cc
            # ncclTopoTuneModel: 'Enable LL128 by default only on Volta/Ampere/Hopper/Blackwell+NVLink. Other
            # cases are not tested and may cause silent data corruption', pEnable &= typeIntra <= PATH_NVB)
            allowed = tuple(p for p in allowed if p != "ll128")
        if not node.nic_ordered_128b_delivery:
            # the plugin sets NCCL_PROTO=simple when it initialises, for every communicator of the process
            allowed = tuple(p for p in allowed if p == "simple")
            if not allowed:
                raise SpecError(self._proto_field, f"{list(protocols or ())!r} leaves no protocol on NICs without "
                                "ordered 128-byte delivery (NCCL runs Simple only there)", "include simple")
        self.protocols = allowed
        self.G = node.gpus_per_node
        self.nvlink = node.gpu_scaleup_bandwidth * profile.nvlink_efficiency
        if node.scaleup_fabric == "pcie":
            self.nvlink = min(self.nvlink, node.gpu.pcie_bandwidth_bytes_per_s * profile.nvlink_efficiency)
        # a full mesh (xGMI): one link to each peer; a group uses only the links to its own members
        self.mesh = node.scaleup_mesh
        self.link = node.scaleup_link_bandwidth * profile.nvlink_efficiency if self.mesh else self.nvlink
        self.nic_per_gpu = node.nic_bandwidth_per_gpu * profile.nic_efficiency
        self.nodes_per_leaf = cluster.nodes_per_leaf
        self.torus_link = (cluster.torus_link_bandwidth_bytes_per_s or 0.0) * profile.nic_efficiency
        arch = architecture_of(cluster.gpu)
        self.arch = arch
        # NVLS: NVLink SHARP needs NVSwitches of a Hopper or later node
        nvls_key = f"nccl.nvls_allreduce_efficiency.{arch}"
        self.nvls = None
        if node.scaleup_fabric == "nvswitch" and self.G > 1 and arch in ("hopper", "blackwell"):
            self.nvls = node.gpu_scaleup_bandwidth * value(nvls_key)
        # a ring's one local copy per loop (the rank's chunk read and written once) runs at the GPU's memory
        # bandwidth while the links wait (constants nccl.ring_local_copy_bytes_per_byte)
        self.hbm = node.gpu.hbm_bandwidth_bytes_per_s * profile.memory_efficiency
        self.ll_max_node = value(f"nccl.ll_max_busbw.{arch}") if arch in ("ampere", "hopper", "blackwell") \
            else value("nccl.ll_max_busbw.ampere")
        # a cluster's latency above NCCL's LL128 ring step is added to every step of its tier, and so is the
        # latency the node's net plugin reports (NCCL adds ncclNetProperties.latency to every protocol's
        # network step, twice for Simple: src/graph/tuning.cc)
        self.extra_intra = max(0.0, cluster.intra_node_latency_s - _lat("nvlink", "ring", "ll128"))
        self.extra_inter = max(0.0, cluster.inter_node_latency_s - _lat("net", "ring", "ll128")) \
            + node.net_plugin_latency_s
        self._options: dict[tuple[str, GroupPlacement], np.ndarray] = {}
        self._lines: dict[tuple[str, GroupPlacement], list[tuple[float, float, float, float, float, bool, int]]] = {}

    # ---- the fabric --------------------------------------------------------------------------------
    def scaleup(self, ppn: int, kind: str = "") -> float:
        """Bytes/s one direction a rank gets from the node's scale-up fabric in a collective of ``kind``
        whose group has ``ppn`` ranks in the node. Behind a switch: the GPU's whole port, whatever the
        group. On a full mesh (xGMI: one link to each peer; AMD MI300X data sheet, ROCm/rccl README
        'using less than 8 MI300 GPUs') the ranks' rings and direct sends run over the links joining
        the group's members: ppn - 1 links (RCCL's topology reports 3 x 48 GB/s for 4 MI300X,
        ROCm/rccl#1210), and one link for a send to one peer."""
        if not self.mesh or ppn <= 1:
            return self.nvlink
        if kind == "send_recv":
            return self.link
        return min(self.nvlink, (ppn - 1) * self.link)

    def _taper(self, pl: GroupPlacement) -> float:
        if self.cluster.topology == "torus" or pl.node_span <= self.nodes_per_leaf:
            return 1.0
        per_tier = self.cluster.tier_oversubscription
        if per_tier:
            return math.prod(per_tier[: max(1, self.switch_tiers(pl) - 1)])
        return self.cluster.oversubscription

    def node_network(self, pl: GroupPlacement) -> float:
        """Bytes/s one direction a node's ranks of the group get from the network for a ring or tree:
        their NICs (beyond the leaf divided by the taper), or on a torus the links of the slice:
        two per dimension whose ring wraps around, one per open dimension (the buffer split over the
        dimensions, each reduced along its own rings at once, as TPU all-reduces do: Ying et al. 2018,
        arXiv 1811.06992)."""
        if self.cluster.topology == "torus":
            links = sum(2 if wraps else 1 for extent, wraps in torus_slice(self.cluster, pl.node_span) if extent > 1)
            return max(1, links) * self.torus_link
        return pl.ranks_per_node * self.nic_per_gpu / self._taper(pl)

    def _gpu_network_all_to_all(self, pl: GroupPlacement) -> float:
        """Bytes/s one direction a rank of the group gets from the network in an all-to-all: its NIC
        share, or on a torus the slice's bisection: half of each node's data crosses the cut across the
        longest dimension, 2 (wrapped) or 1 link per node column each way, i.e. 8 B / a (4 B / a open)
        per node for a longest extent a, at most the node's links."""
        if self.cluster.topology == "torus":
            sl = [x for x in torus_slice(self.cluster, pl.node_span) if x[0] > 1]
            a, wraps = max(sl) if sl else (1, False)
            cut = 2 if wraps else 1          # links of a node column crossing the cut, each way
            # half of every node's bytes cross; n / a columns of cut links carry them each way
            bis = 2 * 2 * cut * self.torus_link / a if a > 1 else math.inf
            return min(self.node_network(pl), bis) / pl.ranks_per_node
        return self.nic_per_gpu / self._taper(pl)

    def switch_tiers(self, pl: GroupPlacement) -> int:
        """Switch tiers a group's traffic climbs in a fat tree: 0 inside a node, 1 under one leaf
        (nodes_per_leaf nodes), and one more each time the node span outgrows the tier below times
        the switch radix (2 up to nodes_per_leaf x radix nodes, a two-tier fat tree, and so on)."""
        if pl.nodes <= 1 or self.cluster.topology == "torus":
            return 0
        tiers, reach = 1, float(self.nodes_per_leaf)
        while pl.node_span > reach:
            pod = self.cluster.nodes_per_pod if tiers == 1 else None
            tiers, reach = tiers + 1, float(pod) if pod and pod > reach else reach * _SWITCH_RADIX
        return tiers

    def bandwidth(self, pl: GroupPlacement, kind: str) -> float:
        """Bus bandwidth of a ring with the Simple protocol (the link's NCCL bandwidth)."""
        if pl.nodes == 1:
            return self.scaleup(pl.ranks_per_node, kind)
        if kind == "send_recv":
            # one rank's NIC, or on a torus the link to the neighbouring node
            return self.torus_link if self.cluster.topology == "torus" else self.nic_per_gpu / self._taper(pl)
        return min(self.scaleup(pl.ranks_per_node, kind), self.node_network(pl))

    def _step_latency(self, pl: GroupPlacement) -> float:
        """Per-step latency of the cluster's figures (all-to-all and send/recv)."""
        if pl.nodes > 1:
            return self.cluster.inter_node_latency_s + self.cluster.node.net_plugin_latency_s \
                + 2 * _HOP * max(0, self.switch_tiers(pl) - 1)
        return self.cluster.intra_node_latency_s

    def latency(self, pl: GroupPlacement, kind: str) -> float:
        """The least latency of a collective on ``pl`` (its smallest message's time)."""
        if kind in ("send_recv", "all_to_all"):
            return self._p2p_latency(pl, kind)
        opts = self.options(kind, pl)
        return float(opts[:, 0].min()) if len(opts) else 0.0

    def _p2p_latency(self, pl: GroupPlacement, kind: str) -> float:
        alpha = self._step_latency(pl)
        if kind == "send_recv":
            return alpha
        n = pl.size
        return alpha * min(n - 1, math.ceil(math.log2(n)) + 1)

    # ---- NCCL's (algorithm, protocol) menu ---------------------------------------------------------
    def options(self, kind: str, pl: GroupPlacement) -> np.ndarray:
        """NCCL's choices for ``kind`` on ``pl``: rows of (latency s, seconds per byte, algorithm index,
        protocol index); the time of a message is the least latency + bytes x seconds per byte."""
        key = (kind, pl)
        got = self._options.get(key)
        if got is None:
            allowed = {PROTOCOLS.index(p) for p in self.protocols}
            rows = [tuple(r) + _NO_PIPE if len(r) == 4 else tuple(r) for r in self._menu(kind, pl)
                    if int(r[_PROTO_COL]) in allowed]
            if self._allowed_algos is not None and kind not in ("send_recv", "all_to_all") and rows:
                # NCCL_ALGO: NCCL keeps the ring of every collective but all-reduce
                keep = self._allowed_algos | ({_RING} if kind != "all_reduce" else set())
                rows = [r for r in rows if int(r[_ALG_COL]) in keep]
                if not rows:
                    raise SpecError(self._algo_field, f"NCCL_ALGO={','.join(self.algorithms or ())} leaves NCCL no "
                                    f"algorithm for {kind} on {pl.size} GPUs over {pl.nodes} node(s) (NCCL fails: "
                                    "'no algorithm/protocol available')", "add Ring to NCCL_ALGO")
            got = self._options[key] = np.array(rows, dtype=float).reshape(-1, _COLS)
        return got

    def nvls_tuning(self, nodes: int, ppn: int) -> tuple[int, int, int]:
        """(NVLS channels, chunk bytes, NVLS tree's largest chunk) NCCL sets for this node and span
        (NVIDIA/nccl src/transport/nvls.cc ncclNvlsTuning and ncclNvlsTreeSm100Tuning, commit 5067397c;
        the latter's GPU-to-NIC path conditions left out)."""
        chunk = int(value("nccl.nvls_chunk_bytes"))
        tree_max = 0
        if self.arch == "blackwell":
            channels = int(value("nccl.nvls_channels.blackwell_many_nodes" if nodes > 1
                                 else "nccl.nvls_channels.blackwell_one_node"))
            t = _Sm100Tuning()
            nic = self.cluster.node.nic_bandwidth_bytes_per_s
            if nodes == 2 and nic >= t["two_nodes.min_nic_bytes_per_s"]:
                channels, tree_max = int(t["two_nodes.channels"]), int(t["two_nodes.tree_max_chunk_bytes"])
                if ppn <= t["two_nodes.small_ppn"]:
                    chunk = tree_max = int(t["two_nodes.small_ppn_chunk_bytes"])
            elif nodes > 2 and nic >= t["many_nodes.fast_nic_bytes_per_s"]:
                if ppn <= t["many_nodes.fast_max_ppn"]:
                    channels = int(t["many_nodes.fast_channels"])
                    chunk = tree_max = int(t["many_nodes.fast_chunk_bytes"])
                else:
                    channels = int(t["many_nodes.dense_channels"])
                    tree_max = int(t["many_nodes.dense_tree_max_chunk_bytes"] if ppn < t["many_nodes.dense_ppn"]
                                   else t["many_nodes.densest_tree_max_chunk_bytes"])
            elif nodes > 2 and nic >= t["many_nodes.slow_nic_bytes_per_s"]:
                channels, tree_max = int(t["many_nodes.slow_channels"]), int(t["many_nodes.slow_tree_max_chunk_bytes"])
        else:
            channels = int(value("nccl.nvls_channels.hopper"))
        if not tree_max:
            tree_max = int(value("nccl.nvls_tree_max_chunk_bytes.many_nodes")) if nodes >= 4 else chunk
        return channels, chunk, tree_max

    def _menu(self, kind: str, pl: GroupPlacement) -> list[tuple[float, ...]]:
        n, N, ppn = pl.size, pl.nodes, pl.ranks_per_node
        if n <= 1:
            return []
        if kind in ("send_recv", "all_to_all"):
            return [(self._p2p_latency(pl, kind), BUS_FACTOR[kind](n) / self.bandwidth(pl, kind),
                     _RING, PROTOCOLS.index("simple"))]
        ar = kind == "all_reduce"
        out: list[tuple[float, ...]] = []
        tier_hops = 2 * _HOP * max(0, self.switch_tiers(pl) - 1)

        def net_lat(algo: str, proto: str) -> float:
            extra = self.extra_inter * (2 if proto == "simple" else 1)
            return _lat("net", algo, proto) + extra + tier_hops

        def nv_lat(algo: str, proto: str) -> float:
            return _lat("nvlink", algo, proto) + self.extra_intra

        ll_max = self.ll_max_node if N == 1 else value("nccl.ll_max_busbw.net_2nodes" if N == 2
                                                       else "nccl.ll_max_busbw.net_many")
        factor = BUS_FACTOR[kind](n)
        # ring
        busbw = self.bandwidth(pl, kind)
        nsteps = (2 if ar else 1) * (n - 1)
        n_inter = 0 if N == 1 else (2 if ar else 1) * (N - 1)
        net_hops = N - 1
        if N > 1 and self.cluster.topology == "torus":
            # one ring per dimension, one after the other: a dimension of extent a takes a - 1 steps
            net_hops = sum(extent - 1 for extent, _ in torus_slice(self.cluster, pl.node_span))
            n_inter = (2 if ar else 1) * net_hops
            nsteps = (2 if ar else 1) * (n - N) + n_inter
        if kind == "broadcast":
            # a pipelined ring: the first bytes cross its n - 1 hops (N - 1 of them between nodes)
            for p, proto in enumerate(PROTOCOLS):
                bw = {"ll": min(busbw * _LL, ll_max), "ll128": busbw * _LL128, "simple": busbw}[proto]
                hops = (n - N) * nv_lat("ring", proto) + net_hops * net_lat("tree" if ppn == 1 else "ring", proto)
                out.append((_lat("base", "ring", proto) + hops, factor / bw, _RING, p))
            return out
        # the rank's chunk (1/n of nccl-tests' size) copied once in memory, the ring's links idle meanwhile
        local_copy = _LOCAL_COPY / (n * self.hbm)
        for p, proto in enumerate(PROTOCOLS):
            bw = {"ll": min(busbw * _LL, ll_max), "ll128": busbw * _LL128, "simple": busbw}[proto]
            intra = nv_lat("ring", proto)
            if N > 1:
                intra = max(intra, _NET_OVERHEAD * (_NET_OVERHEAD_SIMPLE if proto == "simple" else 1))
            inter = net_lat("tree" if ppn == 1 else "ring", proto)
            lat = _lat("base", "ring", proto) + (nsteps - n_inter) * intra + n_inter * inter
            if ar and N > 1 and proto == "simple":
                lat *= _PLATEAU
            out.append((lat, factor / bw + local_copy, _RING, p))
        if ar and N > 1:
            # tree: NVLink chain in the node, double binary tree between nodes
            node_nic = self.node_network(pl)
            # each GPU of the chain sends up (reduce) and down (broadcast) through its one NVSwitch
            # port: half the link each (NCCL's tree ratio .5)
            chain = self.scaleup(ppn, kind) / 2 if ppn > 1 else math.inf
            algbw = _TREE * min(chain, node_nic / (2.0 * (N - 1) / N))
            for p, proto in enumerate(PROTOCOLS):
                bw = algbw * _TREE_PROTO[proto]
                if proto == "ll":
                    bw = min(bw, ll_max / 2)       # NCCL caps the tree's LL bus bandwidth; algbw = busbw / 2
                lat = _lat("base", "tree", proto) + 2 * ((ppn - 1) * nv_lat("tree", proto)
                                                         + _log2i(N) * net_lat("tree", proto))
                out.append((lat, 1.0 / bw, _TREE_ALGO, p))
        simple = PROTOCOLS.index("simple")
        if ar and self.nvls is not None and ppn > 1:
            channels, chunk, tree_max = self.nvls_tuning(N, ppn)
            lanes = channels * ppn          # nChannels x nHeads: one NVLS head per GPU of the node
            stages = _NVLS_STAGES
            if N == 1:
                out.append((_lat("base", "nvls", "simple") + nv_lat("nvls", "simple"), 1.0 / self.nvls, _NVLS, simple,
                            lanes, stages - 1, chunk))
            else:
                node_nic = self.node_network(pl)
                algbw = min(self.nvls, node_nic / (2.0 * (N - 1) / N))
                lat = (_lat("base", "nvls_tree", "simple") + nv_lat("nvls", "simple")
                       + 2 * _log2i(N) * net_lat("nvls_tree", "simple"))
                # a chunk also climbs the tree's log2(N) levels and comes back down, a network hop each
                tree_stages = stages + _NVLS_TREE_STAGES_PER_LEVEL * max(1, _log2i(N))
                out.append((lat, 1.0 / algbw, _NVLS_TREE, simple, lanes, tree_stages - 1, min(chunk, tree_max)))
                if self.cluster.in_network_reduction:
                    # NVLS + SHARP: each node sends its buffer up once and gets the reduction back once
                    # (the switch's reduction one more stage: up and down one network hop)
                    algbw = min(self.nvls, node_nic)
                    lat = nv_lat("nvls", "simple") + net_lat("nvls", "simple")
                    out.append((lat, 1.0 / algbw, _NVLS, simple, lanes, stages + _NVLS_TREE_STAGES_PER_LEVEL - 1,
                                chunk))
        if ar and N > 1 and self.cluster.in_network_reduction:
            node_nic = self.node_network(pl)
            hopper = _COLLNET_HOPPER if self.arch in ("hopper", "blackwell") else 1.0
            if self.cluster.node.scaleup_fabric == "nvswitch":
                # CollNet Direct: NVLink reduce-scatter and all-gather ((ppn-1)/ppn of the buffer each way
                # through a GPU's port, twice), each GPU's NIC carrying 1/ppn of the buffer up and down
                intra_bw = self.scaleup(ppn, kind) * ppn / (2.0 * (ppn - 1)) if ppn > 1 else math.inf
                algbw = hopper * min(intra_bw, node_nic)
                lat = (_lat("base", "collnet_direct", "simple") + net_lat("collnet_direct", "simple")
                       + 2 * (min(1, ppn - 1) * nv_lat("collnet_direct", "simple") + (ppn - 1) * _COLLNET_ARITY))
                out.append((lat, 1.0 / algbw, _COLLNET_DIRECT, simple))
            # CollNet Chain: the tree's NVLink chain (half the port each way), the node's NICs carry the buffer once
            chain = self.scaleup(ppn, kind) / 2 if ppn > 1 else math.inf
            algbw = min(chain, node_nic)
            lat = (_lat("base", "collnet_chain", "simple") + net_lat("collnet_chain", "simple")
                   + 2 * (ppn - 1) * nv_lat("collnet_chain", "simple"))
            out.append((lat, 1.0 / algbw, _COLLNET_CHAIN, simple))
        if N > 1 and self.cluster.topology == "torus":
            # no switches: NCCL's trees, SHARP and PAT need a switched network; rings follow the torus
            return [row for row in out if row[2] == _RING]
        if not ar and N > 1 and ppn == 1:
            # PAT: all-gather / reduce-scatter with one rank per node
            lat = (_lat("base", "pat", "simple") + _log2i(N) * net_lat("pat", "simple") / _PAT_LOG_DIV
                   + n * _PAT_PER_RANK)
            out.append((lat, factor / (_PAT_BW * busbw), _PAT, simple))
        return out

    def choose(self, kind: str, nbytes: float, pl: GroupPlacement) -> tuple[str, str, float]:
        """(algorithm, protocol, seconds) NCCL's model would pick for one collective."""
        opts = self.options(kind, pl)
        if not len(opts) or nbytes <= 0:
            return "none", "none", 0.0
        i, t = self._pick(opts, nbytes)
        return ALGORITHMS[int(opts[i, _ALG_COL])], PROTOCOLS[int(opts[i, _PROTO_COL])], t

    @staticmethod
    def _pick(opts: np.ndarray, nbytes: float) -> tuple[int, float]:
        """(row, seconds): the fastest row for ``nbytes`` (latency + bytes / bandwidth + its chunk
        pipeline's fill) and its time."""
        inv = opts[:, _INV_COL] / np.where(opts[:, _ALG_COL] == _TREE_ALGO,
                                            tree_correction(nbytes, opts[:, _PROTO_COL].astype(int)), 1.0)
        t = opts[:, _LAT_COL] + nbytes * inv
        if np.any(opts[:, _OPS_COL] > 0):
            t = t + pipeline_fill_s(nbytes, opts[:, _INV_COL], opts[:, _OPS_COL], opts[:, _FILL_COL],
                                    opts[:, _CHUNK_COL], opts[:, _ALG_COL] == _NVLS_TREE)
        i = int(np.argmin(t))
        return i, float(t[i])

    # ---- pricing -----------------------------------------------------------------------------------
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
            nic = self._gpu_network_all_to_all(pl)
            inter = nbytes * (n - g) / n / nic
            scaleup = self.scaleup(g, kind)
            if node_dedup:
                top_k, groups, topk_groups = node_dedup
                inter *= min(1.0, expected_target_nodes(top_k, pl.nodes, groups, topk_groups) / top_k)
                intra = nbytes * (g - 1) / g / scaleup
            else:
                intra = nbytes * (g - 1) / n / scaleup
                if self.cluster.topology == "rail-only":
                    # no switch between rails: the share for another node's other rails first crosses NVLink
                    intra += nbytes * (n - g) / n * (g - 1) / g / scaleup
            return max(intra, inter) + self.latency(pl, kind)
        key = (kind, pl)
        menu = self._lines.get(key)
        if menu is None:       # plain floats: one message at a time is faster without numpy
            menu = self._lines[key] = [(float(r[_LAT_COL]), float(r[_INV_COL]), float(r[_OPS_COL]),
                                        float(r[_FILL_COL]), float(r[_CHUNK_COL]), int(r[_ALG_COL]) == _NVLS_TREE,
                                        int(r[_PROTO_COL]) if int(r[_ALG_COL]) == _TREE_ALGO else -1)
                                       for r in self.options(kind, pl)]
        return min(lat + nbytes * (inv / _tree_correction_one(nbytes, corr) if corr >= 0 else inv)
                   + (_fill_one(nbytes, inv, lanes, fill, chunk, tree) if lanes else 0.0)
                   for lat, inv, lanes, fill, chunk, tree, corr in menu)

    def estimate(self, kind: str, nbytes: float, pl: GroupPlacement, algorithm: str = "auto") -> CollectiveEstimate:
        """One collective priced as ``time`` prices it (``algorithm="auto"``: NCCL's pick, the same
        seconds), or with ``algorithm`` forced (a family of ALGORITHM_FAMILIES: NCCL_ALGO); SpecError
        where NCCL cannot run that algorithm for ``kind`` on ``pl``."""
        if kind not in BUS_FACTOR:
            raise SpecError("op", f"unknown collective {kind!r}", f"use one of {', '.join(COLLECTIVES)}")
        n = pl.size
        if algorithm != "auto" and algorithm not in ALGORITHM_FAMILIES:
            raise SpecError("algorithm", f"unknown algorithm {algorithm!r}",
                            f"use auto or one of {', '.join(ALGORITHM_FAMILIES)}")
        if kind in ("send_recv", "all_to_all"):
            if algorithm != "auto":
                raise SpecError("algorithm", f"NCCL runs {kind} as point-to-point sends, not {algorithm}",
                                "use --algorithm auto")
            algo, proto, t, lat = "p2p", "simple", self.time(kind, nbytes, pl), self.latency(pl, kind)
        else:
            opts = self.options(kind, pl)
            if algorithm != "auto":
                allowed = [ALGORITHMS.index(a) for a in ALGORITHM_FAMILIES[algorithm]]
                opts = opts[np.isin(opts[:, _ALG_COL], allowed)] if len(opts) else opts
                if n > 1 and not len(opts):
                    where = f"{n} GPUs ({pl.nodes} node{'s' if pl.nodes > 1 else ''} of {self.cluster.gpu.name})"
                    raise SpecError("algorithm", f"NCCL cannot run {algorithm} for {kind} on {where}",
                                    f"{algorithm} needs {_FAMILY_NEEDS[algorithm]}; use --algorithm auto")
            if not len(opts) or nbytes <= 0:
                algo, proto, t, lat = "none", "none", 0.0, 0.0
            else:
                i, t = self._pick(opts, nbytes)
                algo, proto = ALGORITHMS[int(opts[i, _ALG_COL])], PROTOCOLS[int(opts[i, _PROTO_COL])]
                lat = float(opts[i, _LAT_COL])
        algbw = nbytes / t if t > 0 else 0.0
        intra = inter = None
        if pl.ranks_per_node > 1 and n > 1:
            intra = {"link": self.cluster.node.scaleup_fabric, "ranks_per_node": pl.ranks_per_node,
                     "bandwidth_bytes_per_s": self.scaleup(pl.ranks_per_node, kind), "step_latency_s": self.cluster.intra_node_latency_s}
        if pl.nodes > 1:
            inter = {"link": self.cluster.topology, "nodes": pl.nodes,
                     "nic_bandwidth_bytes_per_s": self.node_network(pl) * self._taper(pl),
                     "oversubscription": self._taper(pl), "switch_tiers": self.switch_tiers(pl),
                     "step_latency_s": self._step_latency(pl)}
        return CollectiveEstimate(kind, float(nbytes), n, pl.nodes, pl.ranks_per_node, algo, proto, t, lat, algbw,
                                  algbw * BUS_FACTOR[kind](n) if n > 1 else 0.0, intra, inter)

    def time_many(self, kind: str, nbytes: np.ndarray, placements: Sequence[GroupPlacement],
                  index: np.ndarray) -> np.ndarray:
        """``time`` of many collectives at once: collective r moves ``nbytes[r]`` on ``placements[index[r]]``
        (the same arithmetic, element by element). Ring-class collectives only (no inter-node all-to-all)."""
        menus = []
        for pl in placements:
            if kind == "all_to_all" and pl.nodes > 1:
                raise ValueError("time_many prices ring collectives; use time() for an inter-node all-to-all")
            menus.append(self.options(kind, pl))
        width = max([len(m) for m in menus] + [1])
        table = np.zeros((len(placements), width, _COLS))
        table[:, :, _LAT_COL] = np.inf
        for j, m in enumerate(menus):
            table[j, :len(m)] = m
        nbytes = np.asarray(nbytes, dtype=float)
        rows = table[index]                                    # (collectives, width, columns)
        inv = rows[:, :, _INV_COL]
        is_tree = rows[:, :, _ALG_COL] == _TREE_ALGO
        if np.any(is_tree):
            inv = inv / np.where(is_tree, tree_correction(nbytes[:, None], rows[:, :, _PROTO_COL].astype(int)), 1.0)
        t = rows[:, :, _LAT_COL] + nbytes[:, None] * inv
        if np.any(rows[:, :, _OPS_COL] > 0):
            t = t + pipeline_fill_s(nbytes[:, None], rows[:, :, _INV_COL], rows[:, :, _OPS_COL], rows[:, :, _FILL_COL],
                                    rows[:, :, _CHUNK_COL], rows[:, :, _ALG_COL] == _NVLS_TREE)
        t = t.min(axis=1)
        return np.where(np.isfinite(t) & (nbytes > 0), t, 0.0)
