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
from clustertwin.cost.network import NetworkPricer
from clustertwin.parallel.layout import place_group
from clustertwin.validate.collectives import compare, size_band, summary

CSV = Path(__file__).resolve().parents[1] / "data" / "validation" / "nccl_tests.csv"
MiB, GiB = 1 << 20, 1 << 30


@pytest.fixture(scope="module")
def rows():
    return compare(CSV)


def test_every_row_is_priced(rows):
    assert len(rows) == 286


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
