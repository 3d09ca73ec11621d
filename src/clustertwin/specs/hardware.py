"""Hardware: GPUSpec, NodeSpec and ClusterSpec. All numbers SI (FLOP/s, bytes, bytes/s, s, W).

Bandwidths are per direction: a GPU's ``scaleup_bandwidth_bytes_per_s`` is what it can send into
the NVLink/xGMI fabric while receiving as much (H100 SXM: 900 GB/s total = 450 GB/s each way).
Quantities may be given as strings ("80GB", "3.35TB/s", "400Gbps", "989TFLOPS") and are parsed here.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ..constants import value
from ..errors import SpecError
from ..units import parse_quantity
from .model import Frozen

Dtype = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "fp4"]
DTYPES: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")


def _q(kind):
    def parse(cls, v, info):
        if v is None:
            return v
        return parse_quantity(v, kind, info.field_name)
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

    _p_hbm: Any = field_validator("hbm_bytes", mode="before")(classmethod(_q("bytes")))
    _p_bw: Any = field_validator("hbm_bandwidth_bytes_per_s", "scaleup_bandwidth_bytes_per_s",
                            "pcie_bandwidth_bytes_per_s", mode="before")(classmethod(_q("bandwidth")))
    _p_tdp: Any = field_validator("tdp_w", "rated_tdp_w", mode="before")(classmethod(_q("power")))

    @property
    def power_clock_scale(self) -> float:
        """Sustained tensor-core clock under a power cap, relative to the rated TDP. Dense GEMMs run
        power-bound at the rated TDP; dynamic power goes as C V^2 f with V roughly proportional to f
        over the DVFS range, so the sustainable clock goes as the cube root of the power allowed
        (a model, not a measurement: a calibrated profile of the capped GPU replaces it)."""
        if self.rated_tdp_w is None or self.tdp_w >= self.rated_tdp_w:
            return 1.0
        return (self.tdp_w / self.rated_tdp_w) ** (1.0 / 3.0)

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
            out[key] = parse_quantity(x, "flops", f"peak_flops.{key}")
            if out[key] <= 0:
                raise SpecError(f"peak_flops.{key}", "must be positive", "give the datasheet dense peak")
        return out

    @model_validator(mode="after")
    def _sane(self) -> "GPUSpec":
        if "bf16" not in self.peak_flops and "fp16" not in self.peak_flops:
            raise SpecError("peak_flops", "needs a bf16 or fp16 peak", "add the dense 16-bit tensor peak")
        for k, v in self.peak_flops.items():
            if v > 1e17:
                raise SpecError(f"peak_flops.{k}", f"{v:.3g} FLOP/s is absurd for one GPU", "give FLOP/s of one GPU, dense")
        if self.hbm_bytes > 1e14:
            raise SpecError("hbm_bytes", f"{self.hbm_bytes:.3g} bytes is absurd for one GPU", 'e.g. "80GB"')
        return self

    def peak(self, dtype: str) -> float:
        """Dense peak for ``dtype``; falls back fp8 -> bf16 -> fp16 where a dtype is not supported."""
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
    nics_per_node: int = Field(8, gt=0, le=64)
    nic_bandwidth_bytes_per_s: float = Field(gt=0, description="per NIC, one direction")

    _p_bw: Any = field_validator("scaleup_bandwidth_bytes_per_s", "nic_bandwidth_bytes_per_s",
                            mode="before")(classmethod(_q("bandwidth")))

    @property
    def gpu_scaleup_bandwidth(self) -> float:
        return self.scaleup_bandwidth_bytes_per_s or self.gpu.scaleup_bandwidth_bytes_per_s

    @property
    def node_nic_bandwidth(self) -> float:
        return self.nics_per_node * self.nic_bandwidth_bytes_per_s

    @property
    def nic_bandwidth_per_gpu(self) -> float:
        return self.node_nic_bandwidth / self.gpus_per_node


class ClusterSpec(Frozen):
    """Nodes on a scale-out network."""

    name: str
    source: str = ""
    node: NodeSpec
    num_nodes: int = Field(gt=0, le=1_000_000)
    topology: Literal["rail-optimized", "fat-tree"] = "rail-optimized"
    oversubscription: float = Field(1.0, ge=1.0, le=64.0, description="fat-tree taper above the leaf, 1 = full bisection")
    nodes_per_leaf: int = Field(int(value("cluster.nodes_per_leaf")), gt=0, le=100_000,
                                description="nodes under one leaf (rail) switch group; beyond it traffic pays the taper")
    intra_node_latency_s: float = Field(value("cluster.intra_node_latency_s"), ge=0, le=1e-2,
                                        description="per collective step on NVLink")
    inter_node_latency_s: float = Field(value("cluster.inter_node_latency_s"), ge=0, le=1e-1,
                                        description="per collective step across the network")

    _p_lat: Any = field_validator("intra_node_latency_s", "inter_node_latency_s", mode="before")(classmethod(_q("latency")))

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
            node = self.node.model_copy(update={"gpus_per_node": num_gpus,
                                                "nics_per_node": max(1, self.node.nics_per_node * num_gpus // g)})
            return self.model_copy(update={"node": node, "num_nodes": 1})
        if num_gpus % g:
            raise SpecError("num_gpus", f"{num_gpus} is not a multiple of {g} GPUs per node",
                            f"use a multiple of {g} or set --gpus-per-node")
        return self.model_copy(update={"num_nodes": num_gpus // g})
