"""A ring collective's one local copy per loop (constants nccl.ring_local_copy_bytes_per_byte): each rank
reads and writes its chunk (1/n of nccl-tests' size) once in its own memory while the ring's links wait."""
from __future__ import annotations

import pytest

from clustertwin.calibrate.profile import profile_for
from clustertwin.catalog import cluster_for_gpu
from clustertwin.cluster.collective import parse_sweep, price_collective, sweep
from clustertwin.cost.network import NetworkPricer
from clustertwin.parallel.layout import place_group

GiB = 1 << 30


def _pricer(gpu: str, n: int, **gpu_update) -> tuple[NetworkPricer, object]:
    c = cluster_for_gpu(gpu, n)
    if gpu_update:
        c = c.model_copy(update={"node": c.node.model_copy(update={"gpu": c.gpu.model_copy(update=gpu_update)})})
    return NetworkPricer(c, profile_for(c.gpu)), c


def test_two_a100s_one_gib_by_hand():
    """2 x A100-80GB, all-reduce of 1 GiB, ring Simple: latency + 2^30 x 2(n-1)/n / (300 GB/s x 0.78)
    + the copy of the rank's half, 2^29 B read and written at 2039 GB/s x 0.86: 612 us."""
    net, c = _pricer("a100-80gb", 2)
    e = price_collective(c, "all_reduce", GiB, algorithm="ring")
    assert (e.algorithm, e.protocol) == ("ring", "simple")
    link = 300e9 * 0.78
    hbm = 2039e9 * 0.86
    assert net.nvlink == pytest.approx(link) and net.hbm == pytest.approx(hbm)
    copy = 2 * (GiB / 2) / hbm
    assert copy == pytest.approx(612.3e-6, rel=1e-3)
    assert e.time_s == pytest.approx(e.latency_s + GiB / link + copy)


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
def test_same_copy_for_gather_and_scatter(op):
    """All-gather and reduce-scatter: (n-1)/n of the size over the link, the rank's 1/n copied once."""
    net, c = _pricer("a100-80gb", 8)
    s = 4 * GiB
    e = price_collective(c, op, s, algorithm="ring")
    assert e.time_s == pytest.approx(e.latency_s + s * 7 / 8 / net.nvlink + 2 * (s / 8) / net.hbm)


def test_bus_bandwidth_grows_with_ranks_on_one_node():
    """The copy is 1/n of the buffer against 2(n-1)/n over the link: a 2-GPU ring loses the most bus
    bandwidth (nccl-tests on A100: ~197, 222, 229 GB/s at 1 GiB for 2, 4, 8 GPUs in vTrain's table)."""
    busbw = []
    for n in (2, 4, 8):
        _, c = _pricer("a100-80gb", n)
        busbw.append(price_collective(c, "all_reduce", GiB).busbw_bytes_per_s)
    assert busbw[0] < busbw[1] < busbw[2]


def test_more_memory_bandwidth_never_slower():
    slow, _ = _pricer("a100-80gb", 8)
    fast, _ = _pricer("a100-80gb", 8, hbm_bandwidth_bytes_per_s=2 * 2039e9)
    for n in (2, 8):
        pl = place_group(n, 1, 8)
        for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send_recv"):
            for b in (4096, 16 << 20, 4 * GiB):
                assert fast.time(op, b, pl) <= slow.time(op, b, pl)


def test_point_to_point_has_no_ring_copy():
    """All-to-all and send/recv run as direct sends, not a ring: memory bandwidth does not price them."""
    slow, _ = _pricer("a100-80gb", 8)
    fast, _ = _pricer("a100-80gb", 8, hbm_bandwidth_bytes_per_s=4 * 2039e9)
    pl = place_group(8, 1, 8)
    for op in ("all_to_all", "send_recv"):
        assert fast.time(op, GiB, pl) == slow.time(op, GiB, pl)


@pytest.mark.parametrize("gpu,n", [("a100-80gb", 2), ("a100-80gb", 8), ("h100-sxm", 16), ("mi300x", 8)])
def test_time_monotone_in_bytes(gpu, n):
    c = cluster_for_gpu(gpu, n)
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        times = [r.time_s for r in sweep(c, op, parse_sweep("1KiB:16GiB"))]
        assert all(a <= b for a, b in zip(times, times[1:])), (gpu, n, op)


def test_a_measured_profile_takes_the_copy_out_of_the_link() -> None:
    """calibrate's measured profile turns nccl-tests' all-reduce bus bandwidth into the NVLink efficiency;
    that figure already includes the ring's local copy, which the pricer adds again, so the link's share
    is the figure less the copy: a round trip through the model's formula gives the link back."""
    from clustertwin.calibrate.profile import link_busbw
    from clustertwin.catalog import load_gpu
    from clustertwin.constants import value
    a100 = load_gpu("a100-80gb")
    n, eff, link = 8, 0.9, 240e9
    c = value("nccl.ring_local_copy_bytes_per_byte")
    per_byte = 2 * (n - 1) / n / link + c / (n * a100.hbm_bandwidth_bytes_per_s * eff)   # the pricer's time/S
    measured = 2 * (n - 1) / n / per_byte                                                   # nccl-tests' busbw
    assert measured < link
    assert link_busbw(measured, n, a100, eff, "ampere") == pytest.approx(link, rel=1e-12)
    # NVLS (Hopper) has no ring copy; an unknown world keeps the figure
    assert link_busbw(measured, n, a100, eff, "hopper") == measured
    assert link_busbw(measured, 0, a100, eff, "ampere") == measured
