"""The collective model (cost/network.py, NCCL's cost model) against the published nccl-tests rows of
data/validation/nccl_tests.csv, and hand-checkable cases of its algorithm and protocol choice."""
from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import pytest

from clustertwin.calibrate.profile import profile_for
from clustertwin.catalog import cluster_for_gpu
from clustertwin.constants import value
from clustertwin.cluster.collective import sweep
from clustertwin.cost.network import NetworkPricer, nvls_chunk_bytes, pipeline_fill_s
from clustertwin.parallel.layout import place_group
from clustertwin.validate.collectives import compare, size_band, summary

CSV = Path(__file__).resolve().parents[1] / "data" / "validation" / "nccl_tests.csv"
MiB, GiB = 1 << 20, 1 << 30


@pytest.fixture(scope="module")
def rows():
    return compare(CSV)


def test_every_row_is_priced(rows):
    assert len(rows) == 351


def test_large_messages_within_tolerance(rows):
    """Bandwidth-bound sizes: median |error| <= 25% from 1 MiB, <= 10% from 1 GiB (issue 19's bar)."""
    big = [abs(r.error) for r in rows if r.nbytes >= MiB]
    huge = [abs(r.error) for r in rows if r.nbytes >= GiB]
    assert statistics.median(big) <= 0.25
    assert statistics.median(huge) <= 0.10


def test_small_messages_right_order_of_magnitude(rows):
    """Latency-bound sizes: NCCL's InfiniBand/NVLink latency tables. EFA and GPUDirect-TCPXO clouds
    are slower per step than InfiniBand (up to 10x at 8 KiB on p4d: their clusters should set
    inter_node_latency_s), so the bar there is about an order of magnitude; on NVLink and InfiniBand
    the median is within 2x and every row within 5x (the all-to-all is priced apart)."""
    small = [r for r in rows if r.nbytes < MiB]
    assert all(1 / 11 <= r.model_s / r.measured_s <= 11 for r in small)
    fabric = [r.model_s / r.measured_s for r in small if not r.run_id.startswith(("aws-", "gcp-"))
              and r.op != "all_to_all"]
    assert 1 / 2 <= statistics.median(fabric) <= 2
    assert all(1 / 5 <= x <= 5 for x in fabric)


def test_summary_groups(rows):
    bands = {k for k, *_ in summary(rows, lambda r: size_band(r.nbytes))}
    assert bands == {"< 1 MiB", "1 MiB - 1 GiB", ">= 1 GiB"}


def _pricer(gpu: str, n: int):
    c = cluster_for_gpu(gpu, n)
    return NetworkPricer(c, profile_for(c.gpu)), c


def test_protocols_move_from_ll_to_simple_with_size():
    net, c = _pricer("h100-sxm", 8)
    pl = place_group(8, 1, 8)
    assert net.choose("all_reduce", 1024, pl)[:2] == ("ring", "ll")
    assert net.choose("all_reduce", 4 * GiB, pl)[:2] == ("nvls", "simple")      # NVLink SHARP on Hopper
    net_a, _ = _pricer("a100-80gb", 8)
    assert net_a.choose("all_reduce", 4 * GiB, pl)[:2] == ("ring", "simple")     # no NVLS on Ampere
    assert net_a.choose("all_gather", 4 * GiB, pl)[:2] == ("ring", "simple")


def test_ring_latency_is_nccls_table():
    """One node of 8, LL: base 6.6 us + 2(n-1) steps x 0.6 us (tuning.cc)."""
    net, _ = _pricer("a100-80gb", 8)
    lat = net.options("all_reduce", place_group(8, 1, 8))[0, 0]
    assert lat == pytest.approx(value("nccl.latency.base.ring.ll") + 14 * value("nccl.latency.nvlink.ring.ll"))


def test_all_gather_latency_grows_linearly_with_ranks_and_tree_all_reduce_does_not():
    net, _ = _pricer("h100-sxm", 8192)
    lat = {n: net.latency(place_group(n, 8, 8), "all_gather") for n in (64, 1024)}
    assert lat[1024] > 10 * lat[64]          # (n - 1) steps (PAT's linear term at one rank per node)
    ar = {n: net.latency(place_group(n, 1, 8), "all_reduce") for n in (64, 1024)}
    assert ar[1024] < 3 * ar[64]             # a tree's log depth (a ring's steps grow 16x)


def test_more_switch_tiers_cost_more():
    net, c = _pricer("h100-sxm", 8 * 4096)
    near, far = place_group(16, 8, 8), place_group(16, 8 * 256, 8)   # 16 nodes under one leaf, or spread
    assert net.switch_tiers(near) == 1 and net.switch_tiers(far) == 3
    assert net.latency(far, "all_gather") > net.latency(near, "all_gather")


def test_time_many_is_time_element_by_element():
    net, _ = _pricer("h100-sxm", 256)
    pls = [place_group(32, 8, 8), place_group(8, 1, 8), place_group(256, 1, 8)]
    nbytes = np.array([1e3, 1e6, 1e9, 3e7, 5e4, 2e9])
    idx = np.array([0, 1, 2, 0, 2, 1])
    for kind in ("all_reduce", "all_gather", "reduce_scatter"):
        many = net.time_many(kind, nbytes, pls, idx)
        one = [net.time(kind, b, pls[i]) for b, i in zip(nbytes, idx)]
        assert many == pytest.approx(one)


def test_nvls_chunks_shrink_with_the_message_as_nccls_calc_coll_chunking():
    """NCCL's NVLS chunk (src/enqueue.cc calcCollChunking) on one H100 node: 16 channels x 8 heads =
    128 lanes; 128 KiB from 1 GiB (64 x 128 x 128 KiB), 64 KiB from 64 MiB, 32 KiB from 8 MiB,
    16 KiB below. NVLS tree on 2 nodes: 64 KiB at 16 MiB (below 4 x 128 x 128 KiB)."""
    chunk = lambda b, tree=False: nvls_chunk_bytes(b, 128, 128 * 1024, tree)
    assert [chunk(b) for b in (4 * MiB, 8 * MiB, 16 * MiB, 64 * MiB, GiB)] == [16384, 32768, 32768, 65536, 131072]
    assert chunk(16 * MiB, tree=True) == 65536
    assert chunk(GiB, tree=True) == 131072
    net, _ = _pricer("h100-sxm", 8)
    assert net.nvls_tuning(1, 8) == (16, 128 * 1024, 128 * 1024)
    assert net.nvls_tuning(4, 8)[2] == 64 * 1024            # treeMaxChunkSize at 4 nodes and more


def test_nvls_pays_its_pipeline_fill_by_hand():
    """16 MiB on one H100 node: 4 rounds of 128 lanes x 32 KiB, plus 2 rounds to fill the 3-stage
    pipeline (scatter, reduce/multicast, gather), at NVLS's algorithm bandwidth, after its latency."""
    net, _ = _pricer("h100-sxm", 8)
    pl = place_group(8, 1, 8)
    algo, proto, t = net.choose("all_reduce", 16 * MiB, pl)
    assert (algo, proto) == ("nvls", "simple")
    lat, inv = net.options("all_reduce", pl)[-1, :2]
    assert t == pytest.approx(lat + (4 + 2) * 128 * 32768 * inv)
    # a message below one round: the whole of it is the fill's chunk
    assert pipeline_fill_s(MiB, inv, 128, 2, 128 * 1024, False) == pytest.approx(2 * MiB * inv)


def test_nvls_bus_bandwidth_grows_with_size_on_one_node():
    """busbw rises with size from 1 MiB to 16 GiB, as nccl-tests shows on DGX H100 (powers of 2)."""
    c = cluster_for_gpu("h100-sxm", 8)
    bw = [r.busbw_bytes_per_s for r in sweep(c, "all_reduce", [MiB << k for k in range(15)])]
    assert all(b2 >= b1 * 0.999 for b1, b2 in zip(bw, bw[1:]))


def test_mid_size_bar_on_nvls_and_efa_runs(rows):
    """Issue 19's 16 MiB bar (busbw within 25%) where the cause is modelled: NVLS chunk pipelines on
    one node (DGX H100, Azure H100/H200/GB200) and two p5 nodes over EFA (aws-ofi-nccl's 75 us)."""
    for run in ("dgxc-h100-1node", "azure-ndh100v5-1vm", "azure-ndh200v5-1vm", "azure-ndgb200v6-1vm",
                "aws-p5-2node-allreduce"):
        (r,) = [r for r in rows if r.run_id.startswith(run) and r.nbytes == 16 * MiB]
        busbw_error = r.measured_s / r.model_s - 1
        assert abs(busbw_error) <= 0.25, (run, busbw_error)


def test_fill_of_one_message_is_the_array_fill():
    from clustertwin.cost.network import _fill_one
    for b in (1e5, 3 * MiB, 16 * MiB, 200 * MiB, 3 * GiB):
        for tree in (False, True):
            assert _fill_one(b, 1e-11, 128, 2, 131072, tree) == pytest.approx(
                pipeline_fill_s(b, 1e-11, 128, 2, 131072, tree))


def test_a100_mid_size_all_reduce_is_nccls_own_prediction():
    """8 x A100 on NVSwitch at 16 MiB: the model prices what NCCL's own cost model predicts
    (tuning.cc ncclTopoGetAlgoTime, ring LL128: base 14 us + 14 steps x 1.9 us, bandwidth 0.92 of the
    ring's bus bandwidth, algbw = busbw x n / 2(n-1)); and the LL128 -> Simple switch falls between
    16 and 32 MiB, as NCCL 2.18's tables put it (~24.3 MB with 12 x 20 GB/s graph channels) and as
    vTrain's A100 table shows it (a step down between 23 and 24 MiB). On top of NCCL's prediction the
    model adds the ring's one local copy per loop that NCCL's cost model leaves out (the rank's 1/8 of
    the buffer read and written at the HBM rate: constants nccl.ring_local_copy_bytes_per_byte)."""
    net, _ = _pricer("a100-80gb", 8)
    pl = place_group(8, 1, 8)
    s = 16 * MiB
    algo, proto, t = net.choose("all_reduce", s, pl)
    assert (algo, proto) == ("ring", "ll128")
    lat = value("nccl.latency.base.ring.ll128") + 14 * value("nccl.latency.nvlink.ring.ll128")
    busbw = net.bandwidth(pl, "all_reduce") * value("nccl.ll128_bandwidth_factor")
    copy = s / 8 * value("nccl.ring_local_copy_bytes_per_byte") / net.hbm
    assert t == pytest.approx(lat + s * (2 * 7 / 8) / busbw + copy)
    assert net.choose("all_reduce", 32 * MiB, pl)[:2] == ("ring", "simple")
    # NCCL 2.18.5's own numbers (12 graph channels x 20 GB/s on a DGX A100) give ~174 us; the model's
    # NVLink efficiency (0.78 of 300 GB/s) lands within 3% of it, before the local copy (~2.4 us here)
    nccl = 40.6e-6 + s / (12 * 20e9 * 0.92 * 8 / 14)
    assert t - copy == pytest.approx(nccl, rel=0.03)
    assert copy == pytest.approx(2.4e-6, rel=0.05)
