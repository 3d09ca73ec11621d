"""What a memory-bound kernel pays beside its bytes (issue 16, item 2; issue 18): the launch gap only.

The GEMM fill-and-drain time (``profile.<arch>.gemm_fixed_s``) is not a floor of every kernel: a memory-bound
kernel's own fixed time is its launch plus one DRAM round trip (a few hundred ns), which the 1 us inter-kernel
gap (``host.kernel_gap_s``) already stands for (docs/model.md, the paragraph on the GEMM fixed time). These
tests pin that pricing so a per-kernel floor cannot come in twice or silently."""
from __future__ import annotations

import pytest

from clustertwin.catalog import load_gpu
from clustertwin.constants import value
from clustertwin.cost.compute import ComputePricer
from clustertwin.cost.profile import ARCH_PROFILES
from clustertwin.specs.framework import get_framework
from clustertwin.workload.ops import Op, OpKind, Phase

H100 = load_gpu("h100-sxm")
HOPPER = ARCH_PROFILES["hopper"]


def _pricer():
    return ComputePricer(H100, HOPPER, get_framework("megatron"))


@pytest.mark.parametrize("nbytes", [64e3, 2e6, 512e6])
@pytest.mark.parametrize("kernels", [1, 3])
def test_a_memory_bound_kernel_pays_its_bytes_and_the_launch_gap_only(nbytes, kernels):
    """An RMSNorm of a decode batch (64 kB) or a large residual add: bytes / bandwidth + gap per kernel."""
    op = Op("layer.norm", OpKind.ELEMENTWISE, Phase.FWD, bytes=nbytes, layer="layer", kernels=kernels)
    p = _pricer()
    gap = get_framework("megatron").kernel_gap_s
    assert gap == value("host.kernel_gap_s")
    assert p.time(op) == pytest.approx(nbytes / p.mem_bw + gap * kernels)
    assert p.time(op) < nbytes / p.mem_bw + gap * kernels + HOPPER.gemm_fixed_s


def test_the_gemm_fixed_time_is_not_a_floor_of_small_memory_bound_kernels():
    """Per kernel, the smallest elementwise op costs the gap (1 us), a small compute-bound GEMM gap + 3.8 us."""
    p = _pricer()
    tiny = Op("layer.act", OpKind.ELEMENTWISE, Phase.FWD, bytes=1.0, layer="layer")
    assert p.time(tiny) == pytest.approx(get_framework("megatron").kernel_gap_s, rel=1e-3)
    assert p.time(tiny) < HOPPER.gemm_fixed_s
