"""`clustertwin collective` (issue 19 item 1): nccl-tests' definitions hand-checked, the training
model's prices, invariants of the sweep, and every bad input refused in one line."""
from __future__ import annotations

import json
import re

import pytest

from clustertwin.calibrate.profile import profile_for
from clustertwin.catalog import cluster_for_gpu
from clustertwin.cli import main
from clustertwin.cluster.collective import parse_size, parse_sweep, price_collective, sweep
from clustertwin.cost.network import NetworkPricer
from clustertwin.errors import SpecError
from clustertwin.parallel.layout import place_group

GiB, MiB = 1 << 30, 1 << 20


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("op, factor", [("all_reduce", 2 * 7 / 8), ("all_gather", 7 / 8), ("reduce_scatter", 7 / 8),
                                        ("all_to_all", 7 / 8), ("broadcast", 1.0), ("send_recv", 1.0)])
def test_bus_bandwidth_is_nccl_tests_definition(op, factor):
    """nccl-tests doc/PERFORMANCE.md: algbw = size / time, busbw = algbw x the op's factor (n = 8)."""
    e = price_collective(cluster_for_gpu("a100-80gb", 8), op, GiB)
    assert e.algbw_bytes_per_s == pytest.approx(GiB / e.time_s)
    assert e.busbw_bytes_per_s == pytest.approx(e.algbw_bytes_per_s * factor)


def test_same_seconds_as_the_training_model():
    """auto = NCCL's pick = NetworkPricer.time, the figure the step model uses."""
    for gpu, n in (("h100-sxm", 8), ("h100-sxm", 64), ("a100-80gb", 32)):
        c = cluster_for_gpu(gpu, n)
        net = NetworkPricer(c, profile_for(c.gpu))
        pl = place_group(n, 1, c.gpus_per_node)
        for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
            for b in (4096, 16 * MiB, 2 * GiB):
                assert price_collective(c, op, b).time_s == pytest.approx(net.time(op, b, pl))


def test_one_node_ring_at_large_size_runs_at_the_link():
    """A ring all-reduce of a large buffer on one A100 node: busbw -> the NVLink bus bandwidth, less the
    ring's one local copy per loop (the rank's 1/8 of the buffer read and written at the HBM rate)."""
    c = cluster_for_gpu("a100-80gb", 8)
    net = NetworkPricer(c, profile_for(c.gpu))
    e = price_collective(c, "all_reduce", 16 * GiB)
    assert (e.algorithm, e.protocol) == ("ring", "simple")
    seconds_per_byte = 1.75 / net.nvlink + 2 / (8 * net.hbm)
    assert e.busbw_bytes_per_s == pytest.approx(1.75 / seconds_per_byte, rel=0.01)
    assert e.busbw_bytes_per_s < net.nvlink


def test_sweep_time_monotone_and_busbw_rises():
    for gpu, n in (("h100-sxm", 8), ("h100-sxm", 32), ("a100-80gb", 16)):
        c = cluster_for_gpu(gpu, n)
        for op in ("all_reduce", "all_gather", "broadcast", "all_to_all"):
            rows = sweep(c, op, parse_sweep("1KiB:16GiB"))
            times = [r.time_s for r in rows]
            assert all(a <= b for a, b in zip(times, times[1:])), (gpu, op)
            assert rows[-1].busbw_bytes_per_s > rows[0].busbw_bytes_per_s


def test_more_bandwidth_never_slower():
    base = cluster_for_gpu("h100-sxm", 32)
    faster = base.model_copy(update={"node": base.node.model_copy(
        update={"nic_bandwidth_bytes_per_s": 2 * base.node.nic_bandwidth_bytes_per_s})})
    tapered = base.model_copy(update={"oversubscription": 4.0, "nodes_per_leaf": 2})
    for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send_recv"):
        for b in (64 * 1024, 16 * MiB, 4 * GiB):
            t = price_collective(base, op, b).time_s
            assert price_collective(faster, op, b).time_s <= t
            assert price_collective(tapered, op, b).time_s >= t


def test_collnet_needs_in_network_reduction_and_halves_the_network_traffic():
    c = cluster_for_gpu("h100-sxm", 64)
    with pytest.raises(SpecError, match="collnet"):
        price_collective(c, "all_reduce", GiB, algorithm="collnet")
    sharp = c.model_copy(update={"in_network_reduction": True})
    e = price_collective(sharp, "all_reduce", 4 * GiB, algorithm="collnet")
    assert e.algorithm.startswith("collnet")
    ring = price_collective(sharp, "all_reduce", 4 * GiB, algorithm="ring")
    assert e.time_s < ring.time_s
    assert price_collective(sharp, "all_reduce", 4 * GiB).time_s <= price_collective(c, "all_reduce", 4 * GiB).time_s


def test_forced_algorithms_that_nccl_cannot_run_are_refused():
    a100 = cluster_for_gpu("a100-80gb", 8)
    with pytest.raises(SpecError, match="nvls"):
        price_collective(a100, "all_reduce", GiB, algorithm="nvls")
    with pytest.raises(SpecError, match="tree"):
        price_collective(a100, "all_gather", GiB, algorithm="tree")
    with pytest.raises(SpecError, match="point-to-point"):
        price_collective(a100, "all_to_all", GiB, algorithm="ring")
    assert price_collective(cluster_for_gpu("h100-sxm", 8), "all_reduce", GiB, algorithm="nvls").algorithm == "nvls"
    assert price_collective(cluster_for_gpu("h100-sxm", 16), "all_reduce", GiB, algorithm="tree").algorithm == "tree"


def test_sizes_parse_at_the_edge():
    assert parse_size("1KiB") == 1024 and parse_size("16GiB") == 16 * GiB and parse_size("1GB") == 10**9
    assert parse_sweep("1KiB:8KiB") == [1024, 2048, 4096, 8192]
    assert parse_sweep("1KiB:64KiB:4") == [1024, 4096, 16384, 65536]


def test_cli_json_schema(capsys):
    code, out, _ = run(capsys, "collective", "--op", "all_reduce", "--bytes", "1GiB", "--gpu", "h100-sxm",
                       "--num-gpus", "16", "--json")
    assert code == 0
    d = json.loads(out)
    for k in ("schema", "op", "bytes", "num_gpus", "algorithm", "time_s", "algbw_bytes_per_s", "busbw_bytes_per_s",
              "protocol", "phases"):
        assert k in d, k
    assert d["schema"] == 1 and d["bytes"] == GiB and d["num_gpus"] == 16 and d["phases"]["inter"]["nodes"] == 2
    code, out, _ = run(capsys, "collective", "--op", "all_gather", "--sweep", "1KiB:1MiB", "--gpu", "a100-80gb",
                       "--json")
    d = json.loads(out)
    assert code == 0 and d["schema"] == 1 and [r["bytes"] for r in d["rows"]] == [1024 << i for i in range(11)]


@pytest.mark.parametrize("args, field", [
    (("--op", "all_reduce", "--bytes", "1XB"), "bytes"),
    (("--op", "all_reduce", "--bytes", "0"), "bytes"),
    (("--op", "all_reduce", "--bytes", "1.5"), "bytes"),
    (("--op", "all_reduce"), "bytes"),
    (("--op", "all_reduce", "--bytes", "1GiB", "--sweep", "1KiB:1MiB"), "bytes"),
    (("--op", "allreduce_x", "--bytes", "1GiB"), "op"),
    (("--op", "all_reduce", "--bytes", "1GiB", "--algorithm", "magic"), "algorithm"),
    (("--op", "all_reduce", "--bytes", "1GiB", "--gpu", "a100-80gb", "--algorithm", "nvls"), "algorithm"),
    (("--op", "all_reduce", "--sweep", "1GiB:1KiB"), "sweep"),
    (("--op", "all_reduce", "--sweep", "1KiB"), "sweep"),
    (("--op", "all_reduce", "--sweep", "1KiB:1GiB:1"), "sweep"),
    (("--op", "all_reduce", "--bytes", "1GiB", "--num-gpus", "1"), "num_gpus"),
    (("--op", "all_reduce", "--bytes", "1GiB", "--num-gpus", "12"), "num_gpus"),
])
def test_bad_input_is_one_line(capsys, args, field):
    code, _, err = run(capsys, "collective", *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert re.match(rf"error: {field}[^:;]*: .+", lines[0]), lines[0]
