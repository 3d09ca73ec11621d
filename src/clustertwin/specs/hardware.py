"""Hardware: GPUSpec, NodeSpec and ClusterSpec. All numbers SI (FLOP/s, bytes, bytes/s, s, W).

Bandwidths are per direction: a GPU's ``scaleup_bandwidth_bytes_per_s`` is what it can send into
the NVLink/xGMI fabric while receiving as much (H100 SXM: 900 GB/s total = 450 GB/s each way).
Quantities may be given as strings ("80GB", "3.35TB/s", "400Gbps", "989TFLOPS") and are parsed here.

Every quantity must lie in a plausible range (``PLAUSIBLE``): a NIC of 400 bytes/s is a unit slip
(400 meant as Gb/s), not hardware, and is refused rather than priced. Files (the catalog's and the
user's) must also give bandwidths and sizes with a unit (``UNIT_REQUIRED``; see docs/clusters.md).
"""
from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ..constants import value
from ..errors import SpecError, UnitError
from ..units import Kind, format_si, has_unit, parse_quantity
from .model import Frozen
from .nccl import NcclEnv

Dtype = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "fp4"]
DTYPES: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")

# ---- quantities: their kind, the range real hardware lies in, and the unit a file must give -----
QUANTITY_KINDS: dict[str, Kind] = {
    "peak_flops": "flops", "hbm_bytes": "bytes", "hbm_bandwidth_bytes_per_s": "bandwidth",
    "scaleup_bandwidth_bytes_per_s": "bandwidth", "pcie_bandwidth_bytes_per_s": "bandwidth",
    "nic_bandwidth_bytes_per_s": "bandwidth", "tdp_w": "power", "rated_tdp_w": "power",
    "intra_node_latency_s": "latency", "inter_node_latency_s": "latency", "net_plugin_latency_s": "latency",
    "torus_link_bandwidth_bytes_per_s": "bandwidth",
}

# (low, high, what, SI unit): the bounds are input checks, not modelling constants. They are chosen so
# that no real accelerator, server or network violates them, with an order of magnitude to spare on
# each side of the extremes named (datasheets: NVIDIA T4/V100/A100/H100/H200/B200, AMD MI250X/MI300X,
# NVIDIA ConnectX-3..8, PCIe 3.0..6.0); a value outside them is a unit slip, e.g. 400 written for 400 Gb/s.
PLAUSIBLE: dict[str, tuple[float, float, str, str]] = {
    # A100 FP32 (non-tensor) 19.5 TFLOP/s .. B200 FP4 9 PFLOP/s dense
    "peak_flops": (1e12, 1e17, "a GPU's dense peak", "FLOP/s"),
    # 16 GB (T4, V100) .. 288 GB (B300)
    "hbm_bytes": (1e9, 1e14, "a GPU's memory", "B"),
    # T4 320 GB/s .. B200 8 TB/s
    "hbm_bandwidth_bytes_per_s": (100e9, 1e14, "a GPU's memory bandwidth", "B/s"),
    # a PCIe Gen3 x16 peer link ~16 GB/s .. NVLink 5 900 GB/s each way
    "scaleup_bandwidth_bytes_per_s": (1e9, 1e13, "a GPU's scale-up link (one direction)", "B/s"),
    # PCIe Gen3 x16 ~16 GB/s .. Gen6 x16 128 GB/s each way
    "pcie_bandwidth_bytes_per_s": (1e9, 1e12, "a GPU's host link (one direction)", "B/s"),
    # 1 Gb/s Ethernet .. 800 Gb/s (ConnectX-8); the bound is 8 Tb/s
    "nic_bandwidth_bytes_per_s": (1e9 / 8, 1e12, "a NIC (one direction)", "B/s"),
    # one torus link: 1 Gb/s .. 8 Tb/s, as a NIC
    "torus_link_bandwidth_bytes_per_s": (1e9 / 8, 1e12, "a torus link (one direction)", "B/s"),
    # T4 70 W .. a GB200 superchip 2.7 kW
    "tdp_w": (10.0, 1e4, "a GPU's board power", "W"),
    "rated_tdp_w": (10.0, 1e4, "a GPU's rated power", "W"),
    # NCCL's own model charges 0.6 .. 14 us per step (NVIDIA/nccl src/graph/tuning.cc, hwLat)
    "intra_node_latency_s": (0.0, 1e-3, "a collective step's latency in a node", "s"),
    "inter_node_latency_s": (0.0, 1e-3, "a collective step's latency across nodes", "s"),
    # aws-ofi-nccl reports 75 us (p4d/p4de, p5/p5e: src/platform-aws.cpp); the bound is 1 ms
    "net_plugin_latency_s": (0.0, 1e-3, "a network plugin's reported latency", "s"),
}

# kinds a file must write with a unit: a bare 400 could be bytes or bits, per second or not, G or Gi
UNIT_REQUIRED: tuple[str, ...] = ("bytes", "bandwidth")
_UNIT_EXAMPLE = {"hbm_bytes": '"80GB" or "80GiB"', "hbm_bandwidth_bytes_per_s": '"3.35TB/s"',
                 "scaleup_bandwidth_bytes_per_s": '"450GB/s"', "pcie_bandwidth_bytes_per_s": '"64GB/s"',
                 "nic_bandwidth_bytes_per_s": '"400Gbps" or "50GB/s"',
                 "torus_link_bandwidth_bytes_per_s": '"45GB/s"', "peak_flops": '"989TFLOPS"',
                 "tdp_w": '"700W"', "rated_tdp_w": '"700W"'}


def quantity(field: str, v: object, *, path: str | None = None, require_unit: bool = False) -> float:
    """``v`` (a number, or a string with a unit) as an SI quantity of ``field``'s kind, checked
    against its plausible range; with ``require_unit``, a bandwidth or size without a unit is refused
    (what a file must write). ``path`` names the field in the error (default ``field``)."""
    name = path or field
    kind = QUANTITY_KINDS[field]
    if require_unit and kind in UNIT_REQUIRED and not isinstance(v, bool) and not has_unit(v):
        example = _UNIT_EXAMPLE.get(field, '"80GB"')
        raise UnitError(name, f"{v!r} has no unit", f"write it with one, e.g. {example}")
    x = parse_quantity(v, kind, name)
    lo, hi, what, unit = PLAUSIBLE[field]
    if not lo <= x <= hi:
        if kind == "latency":
            raise SpecError(name, f"{x:g} s is implausible for {what} (real hardware: under 1 ms)",
                            'check the unit, e.g. "5us" (a few microseconds per step)')
        scale, u = (8.0, "b/s") if field == "nic_bandwidth_bytes_per_s" else (1.0, unit)
        shown = f"{format_si(x * scale, u)}"
        raise SpecError(name, f"{shown} is implausible for {what} (real hardware lies in "
                              f"{format_si(lo * scale, u)} .. {format_si(hi * scale, u)})",
                        f"check the unit; write it with one, e.g. {_UNIT_EXAMPLE.get(field, repr(format_si(x, u)))}"
                        if kind in UNIT_REQUIRED else f"check the unit, e.g. {_UNIT_EXAMPLE.get(field, '')}")
    return x


def _q(kind):
    def parse(cls, v, info):
        if v is None:
            return v
        return quantity(info.field_name, v)
    return parse


class GPUSpec(Frozen):
    """One accelerator: dense peaks (no sparsity), memory and scale-up link."""

    name: str
    vendor: str = "nvidia"
    source: str = ""
    peak_flops: dict[Dtype, float] = Field(description="dense peak FLOP/s per dtype (no 2:4 sparsity)")
    hbm_bytes: float = Field(gt=0)
    hbm_bandwidth_bytes_per_s: float = Field(gt=0)
    scaleup_bandwidth_bytes_per_s: float = Field(gt=0, description="NVLink/xGMI per GPU, one direction")
    pcie_bandwidth_bytes_per_s: float = Field(value("gpu.pcie_bandwidth_bytes_per_s"), gt=0,
                                              description="host link, one direction")
    tdp_w: float = Field(gt=0, description="board power the GPU runs at (its power limit)")
    rated_tdp_w: float | None = Field(None, gt=0, description="the TDP the datasheet peaks and efficiencies refer "
                                      "to, when tdp_w is a lower power cap; None = tdp_w")
    sm_count: int = Field(108, gt=0, description="SMs/CUs: bounds how small GEMMs fill the chip")
    clock_hz: float | None = Field(None, gt=0, description="a locked SM clock (nvidia-smi -lgc); None = the clock "
                                   "DVFS sustains under tdp_w (cost/power.py prices both)")

    _p_hbm: Any = field_validator("hbm_bytes", mode="before")(classmethod(_q("bytes")))
    _p_bw: Any = field_validator("hbm_bandwidth_bytes_per_s", "scaleup_bandwidth_bytes_per_s",
                            "pcie_bandwidth_bytes_per_s", mode="before")(classmethod(_q("bandwidth")))
    _p_tdp: Any = field_validator("tdp_w", "rated_tdp_w", mode="before")(classmethod(_q("power")))

    @field_validator("peak_flops", mode="before")
    @classmethod
    def _p_flops(cls, v):
        if not isinstance(v, dict) or not v:
            raise SpecError("peak_flops", "must map dtypes to FLOP/s", 'e.g. {bf16: "989TFLOPS", fp8: "1979TFLOPS"}')
        out = {}
        for k, x in v.items():
            key = str(k).lower()
            if key not in DTYPES:
                raise SpecError("peak_flops", f"unknown dtype {k!r}", f"use one of {', '.join(DTYPES)}")
            out[key] = quantity("peak_flops", x, path=f"peak_flops.{key}")
        return out

    @model_validator(mode="after")
    def _sane(self) -> "GPUSpec":
        if "bf16" not in self.peak_flops and "fp16" not in self.peak_flops:
            raise SpecError("peak_flops", "needs a bf16 or fp16 peak", "add the dense 16-bit tensor peak")
        return self

    def peak(self, dtype: str) -> float:
        """Dense peak for ``dtype``; falls back fp8 -> bf16 -> fp16 where a dtype is not supported.
        A job never reaches the fallback for its training precision: the plan rule ``precision_gpu``
        (parallel/rules.py) refuses a precision the GPU has no peak for."""
        for d in (dtype, "bf16" if dtype in ("fp8", "fp4", "fp16") else dtype, "fp16"):
            if d in self.peak_flops:
                return self.peak_flops[d]
        return max(self.peak_flops.values())


class NodeSpec(Frozen):
    """A server: GPUs on one scale-up fabric, NICs to the scale-out network."""

    name: str
    source: str = ""
    gpu: GPUSpec
    gpus_per_node: int = Field(8, gt=0, le=1024)
    scaleup_fabric: Literal["nvswitch", "nvlink-p2p", "xgmi", "pcie"] = "nvswitch"
    scaleup_bandwidth_bytes_per_s: float | None = Field(
        None, gt=0, description="per GPU, one direction; None = the GPU's own link")
    scaleup_topology: Literal["switch", "full-mesh"] | None = Field(
        None, description="how the GPUs of the node are joined: 'switch' (NVSwitch, a PCIe switch: a GPU reaches any "
        "set of peers with its whole link) or 'full-mesh' (AMD xGMI: one link to each peer, so a group of g GPUs uses "
        "g - 1 of them); None: full-mesh for xgmi, switch otherwise")
    scaleup_links_per_gpu: int | None = Field(
        None, gt=0, le=64, description="full-mesh: links per GPU, each carrying scaleup_bandwidth / links; None: "
        "gpus_per_node - 1 (one to each peer)")
    nics_per_node: int = Field(8, gt=0, le=64)
    nic_bandwidth_bytes_per_s: float = Field(gt=0, description="per NIC, one direction")
    nic_ordered_128b_delivery: bool = Field(
        True, description="the NIC delivers 128-byte lines in order (InfiniBand, RoCE, EFA with its RDMA protocol); "
        "false (EFA on p4d/p4de): aws-ofi-nccl sets NCCL_PROTO=simple, NCCL runs neither LL nor LL128")
    net_plugin_latency_s: float = Field(
        0.0, ge=0, le=1e-3, description="the latency the node's NCCL network plugin reports "
        "(ncclNetProperties.latency), which NCCL adds to every network step of its model, twice for Simple "
        "(src/graph/tuning.cc); 0 for InfiniBand/RoCE (NCCL's IB transport) and GPUDirect-TCPXO (its plugin "
        "reports 0); aws-ofi-nccl reports 75 us on p4d/p4de and p5/p5e (src/platform-aws.cpp)")

    _p_bw: Any = field_validator("scaleup_bandwidth_bytes_per_s", "nic_bandwidth_bytes_per_s",
                            mode="before")(classmethod(_q("bandwidth")))
    _p_plugin_lat: Any = field_validator("net_plugin_latency_s", mode="before")(classmethod(_q("latency")))

    @model_validator(mode="after")
    def _mesh(self) -> "NodeSpec":
        if self.scaleup_links_per_gpu is not None:
            if not self.scaleup_mesh:
                raise SpecError("scaleup_links_per_gpu", f"given for a {self.scaleup_topology or self.scaleup_fabric} "
                                "node", "set scaleup_topology: full-mesh, or drop it")
            if self.scaleup_links_per_gpu < self.gpus_per_node - 1:
                raise SpecError("scaleup_links_per_gpu", f"{self.scaleup_links_per_gpu} links cannot join each of "
                                f"{self.gpus_per_node} GPUs to its {self.gpus_per_node - 1} peers",
                                f"give at least {self.gpus_per_node - 1} (a full mesh has one link to each peer)")
        return self

    @property
    def gpu_scaleup_bandwidth(self) -> float:
        return self.scaleup_bandwidth_bytes_per_s or self.gpu.scaleup_bandwidth_bytes_per_s

    @property
    def scaleup_mesh(self) -> bool:
        """Whether each GPU has one link to each peer (a full mesh) rather than a port into a switch."""
        if self.scaleup_topology is not None:
            return self.scaleup_topology == "full-mesh"
        return self.scaleup_fabric == "xgmi"

    @property
    def scaleup_links(self) -> int:
        """Full mesh: the links of one GPU (one per peer of the whole node); a switch node: 1 port."""
        if not self.scaleup_mesh:
            return 1
        return self.scaleup_links_per_gpu or max(1, self.gpus_per_node - 1)

    @property
    def scaleup_link_bandwidth(self) -> float:
        """Bytes/s one direction of one mesh link (a switch node: the GPU's whole port)."""
        return self.gpu_scaleup_bandwidth / self.scaleup_links

    @property
    def node_nic_bandwidth(self) -> float:
        return self.nics_per_node * self.nic_bandwidth_bytes_per_s

    @property
    def nic_bandwidth_per_gpu(self) -> float:
        return self.node_nic_bandwidth / self.gpus_per_node


class StragglerModel(Frozen):
    """Per-GPU speed variation of a cluster's fleet: what a synchronous step waits for (its slowest GPU).

    Each GPU's sustained slowdown relative to the nominal GPU the step model prices is
    x = e + t [hottest GPU of its node] + d [its node is fail-slow], e ~ Normal(0, cv); the defaults and
    their sources are the ``stragglers.*`` constants (Sinha et al. SC'22; Lit Silicon and Llama 3 sec.
    3.3.4; MegaScale sec. 6.3). ``schedule.stragglers`` turns it into the step's ``stragglers`` part."""

    gpu_speed_cv: float = Field(value("stragglers.gpu_speed_cv"), ge=0.0, le=0.5,
                                description="per-GPU sustained speed variation, std/mean (Sinha et al. SC'22)")
    thermal_slowdown: float = Field(value("stragglers.thermal_slowdown"), ge=0.0, le=0.5,
                                    description="the hottest GPU of each node is this much slower (Lit Silicon; "
                                                "Llama 3 sec. 3.3.4: 1-2% from temperature)")
    slow_node_fraction: float = Field(value("stragglers.slow_node_fraction"), ge=0.0, le=1.0,
                                      description="share of nodes that are fail-slow")
    slow_node_slowdown: float = Field(value("stragglers.slow_node_slowdown"), ge=0.0, le=10.0,
                                      description="slowdown of a fail-slow node (MegaScale sec. 6.3: ~10%)")

    @property
    def off(self) -> bool:
        return self.gpu_speed_cv == 0 and self.thermal_slowdown == 0 and (
            self.slow_node_fraction == 0 or self.slow_node_slowdown == 0)


STRAGGLERS_OFF = StragglerModel(gpu_speed_cv=0.0, thermal_slowdown=0.0, slow_node_fraction=0.0)


class ClusterSpec(Frozen):
    """Nodes on a scale-out network."""

    name: str
    source: str = ""
    node: NodeSpec
    num_nodes: int = Field(gt=0, le=1_000_000)
    topology: Literal["rail-optimized", "fat-tree", "rail-only", "torus"] = "rail-optimized"
    oversubscription: float = Field(1.0, ge=1.0, le=64.0, description="fat-tree taper above the leaf, 1 = full bisection")
    nodes_per_leaf: int = Field(int(value("cluster.nodes_per_leaf")), gt=0, le=100_000,
                                description="nodes under one leaf (rail) switch group; beyond it traffic pays the taper")
    tier_oversubscription: tuple[float, ...] = Field(
        (), max_length=4, description="taper of each switch tier above the leaf (leaf uplinks, spine uplinks, ...); "
                                      "a group crossing k tiers pays the product of the first k - 1; empty: "
                                      "oversubscription above the leaf")
    nodes_per_pod: int | None = Field(None, gt=0, le=1_000_000,
                                      description="nodes under one second-tier (spine) group; None: nodes_per_leaf x "
                                                  "the switch radix")
    torus_dims: tuple[int, ...] = Field((), max_length=3, description="torus topology: nodes along each of its 2 or 3 "
                                                                     "dimensions (wrapping around)")
    torus_link_bandwidth_bytes_per_s: float | None = Field(None, gt=0, description="torus: one link between "
                                                           "neighbouring nodes, one direction")
    ocs_block: tuple[int, ...] = Field((), max_length=3, description="torus with optical circuit switches: the block "
                                       "(nodes along each dimension) the switches connect; a slice of whole blocks "
                                       "wraps around in each dimension")
    in_network_reduction: bool = Field(False, description="switches reduce in the network (InfiniBand SHARP): NCCL "
                                       "may run CollNet and multi-node NVLS all-reduce (NCCL_COLLNET_ENABLE=1)")
    nccl_env: NcclEnv | None = Field(None, description="the NCCL environment of the cluster's jobs that the "
                                     "collective model honours: NCCL_ALGO, NCCL_PROTO, NCCL_NVLS_ENABLE (as NCCL "
                                     "reads them; None: NCCL's defaults)")
    intra_node_latency_s: float = Field(value("cluster.intra_node_latency_s"), ge=0, le=1e-3,
                                        description="per collective step on NVLink")
    inter_node_latency_s: float = Field(value("cluster.inter_node_latency_s"), ge=0, le=1e-3,
                                        description="per collective step across the network")
    stragglers: StragglerModel = Field(default_factory=StragglerModel,
                                       description="per-GPU speed variation of the fleet: a synchronous step "
                                                   "waits for its slowest GPU (the step's 'stragglers' part)")

    _p_lat: Any = field_validator("intra_node_latency_s", "inter_node_latency_s", mode="before")(classmethod(_q("latency")))
    _p_torus_bw: Any = field_validator("torus_link_bandwidth_bytes_per_s", mode="before")(classmethod(_q("bandwidth")))

    @model_validator(mode="after")
    def _topology_fields(self) -> "ClusterSpec":
        for t in self.tier_oversubscription:
            if not 1.0 <= t <= 64.0:
                raise SpecError("tier_oversubscription", f"{t} is out of range", "give tapers from 1 (full bisection) to 64")
        if self.topology != "torus":
            if self.torus_dims or self.ocs_block:
                raise SpecError("torus_dims", f"given for a {self.topology} cluster", "set topology: torus, or drop it")
            return self
        dims = self.torus_dims
        if len(dims) not in (2, 3) or any(d < 1 for d in dims):
            raise SpecError("torus_dims", f"{list(dims) or 'missing'}: a torus has 2 or 3 dimensions of 1 or more nodes",
                            "e.g. torus_dims: [16, 16, 16]")
        if math.prod(dims) < self.num_nodes:
            raise SpecError("torus_dims", f"{list(dims)} holds {math.prod(dims)} nodes, fewer than num_nodes "
                            f"{self.num_nodes}", "make the torus at least as large as the cluster")
        if self.torus_link_bandwidth_bytes_per_s is None:
            raise SpecError("torus_link_bandwidth_bytes_per_s", "a torus needs its link bandwidth",
                            'e.g. torus_link_bandwidth_bytes_per_s: 45GB/s')
        if self.ocs_block and (len(self.ocs_block) != len(dims)
                               or any(b < 1 or d % b for b, d in zip(self.ocs_block, dims))):
            raise SpecError("ocs_block", f"{list(self.ocs_block)} does not tile the torus {list(dims)}",
                            "give one block size per dimension, each dividing it, e.g. [4, 4, 4]")
        return self

    @property
    def gpu(self) -> GPUSpec:
        return self.node.gpu

    @property
    def gpus_per_node(self) -> int:
        return self.node.gpus_per_node

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.node.gpus_per_node

    def with_gpus(self, num_gpus: int) -> "ClusterSpec":
        """The same cluster resized to ``num_gpus`` (a multiple of the node size, or less than a node)."""
        g = self.node.gpus_per_node
        if num_gpus <= 0:
            raise SpecError("num_gpus", f"{num_gpus} must be positive", "give the number of GPUs in the job")
        if num_gpus < g:
            # part of a node: a full mesh keeps its links (to peers outside the job too)
            node = self.node.model_copy(update={"gpus_per_node": num_gpus,
                                                "nics_per_node": max(1, self.node.nics_per_node * num_gpus // g),
                                                "scaleup_links_per_gpu": self.node.scaleup_links_per_gpu
                                                if not self.node.scaleup_mesh else self.node.scaleup_links})
            return self.model_copy(update={"node": node, "num_nodes": 1})
        if num_gpus % g:
            raise SpecError("num_gpus", f"{num_gpus} is not a multiple of {g} GPUs per node",
                            f"use a multiple of {g} or set --gpus-per-node")
        return self.model_copy(update={"num_nodes": num_gpus // g})
