"""`clustertwin place` (issue 19 item 3): jobs sharing leaf uplinks slow down, jobs that do not
share do not; the queue, the policies and every bad input."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from clustertwin.catalog import load_cluster
from clustertwin.cli import main
from clustertwin.cluster.placement import (JobRequest, fragmentation, perfetto, place_jobs, uplink_load)

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "docs" / "examples"


def cluster(num_nodes=8, per_leaf=2, taper=2.0):
    c = load_cluster("eos").with_gpus(8 * num_nodes)
    return c.model_copy(update={"nodes_per_leaf": per_leaf, "oversubscription": taper, "topology": "fat-tree"})


def stub(req, c):
    """A step that waits on the network: 1 s plus 0.5 s per unit of the worst taper above 1 (monotone)."""
    worst = max(c.oversubscription, math.prod(c.tier_oversubscription or (1.0,)))
    return 1.0 + 0.5 * (worst - 1.0)


def jobs(*sizes, steps=10):
    return [JobRequest(f"j{i}", "llama3-8b", 8 * n, steps=steps) for i, n in enumerate(sizes)]


def test_jobs_sharing_leaf_uplinks_slow_down_and_isolated_ones_do_not():
    c = cluster()
    shared = place_jobs(c, jobs(2, 2), "spread", stub)          # each job's 2 nodes on 2 leaves, same leaves
    assert all(j.slowdown > 0 for j in shared.jobs)
    assert shared.jobs[0].sharing and shared.jobs[1].sharing
    apart = place_jobs(c, jobs(2, 2), "topology-aware", stub)   # each job under its own leaf
    assert all(j.slowdown == 0 and not j.sharing for j in apart.jobs)


def test_jobs_spanning_disjoint_leaves_do_not_contend():
    c = cluster()
    res = place_jobs(c, jobs(4, 4), "packed", stub)            # j0 on leaves 0-1, j1 on leaves 2-3
    assert [j.leaves for j in res.jobs] == [[0, 1], [2, 3]]
    assert all(j.slowdown == 0 and not j.sharing for j in res.jobs)
    assert res.jobs[0].step_time_alone_s > 1.0                # alone it still pays its own full leaves' taper


def test_full_bisection_has_no_contention():
    res = place_jobs(cluster(taper=1.0), jobs(2, 2), "spread", stub)
    assert all(j.slowdown == 0 for j in res.jobs)


def test_uplink_demand_is_nodes_over_capacity():
    c = cluster(per_leaf=4, taper=2.0)                         # capacity: 2 nodes' NICs per leaf
    load = uplink_load(c, {"a": [0, 1, 4, 5], "b": [2, 6], "c": [3]})
    assert load["leaf 0"] == (["a", "b"], pytest.approx(1.5)) and load["leaf 1"] == (["a", "b"], pytest.approx(1.5))
    assert not uplink_load(c, {"c": [3]})                      # under one leaf: nothing goes up


def test_pod_uplinks_are_shared_too():
    """Three tiers (leaves of 2 nodes, pods of 4, tapers 1 and 4): jobs under one pod each never
    contend; jobs spread over both pods share the pods' 1:4 uplinks."""
    c = cluster(num_nodes=8, per_leaf=2, taper=1.0).model_copy(
        update={"nodes_per_pod": 4, "tier_oversubscription": (1.0, 4.0)})
    apart = place_jobs(c, jobs(4, 4), "packed", stub)          # pods 0 and 1: leaves full bisection
    assert all(j.slowdown == 0 and not j.sharing for j in apart.jobs)
    spread = place_jobs(c, jobs(4, 4), "spread", stub)
    assert all(j.slowdown > 0 for j in spread.jobs)
    assert any(k.startswith("pod") for k in spread.jobs[0].sharing)


def test_queue_fifo_with_backfill_and_utilization():
    c = cluster()                                              # 8 nodes
    reqs = [JobRequest("big", "m", 48, steps=10), JobRequest("wide", "m", 32, steps=10),
            JobRequest("small", "m", 16, steps=5)]
    res = place_jobs(c, reqs, "packed", stub)
    by = {j.name: j for j in res.jobs}
    assert by["big"].start_s == 0 and by["small"].start_s == 0      # small backfills beside big
    assert by["wide"].start_s == pytest.approx(by["small"].end_s) or by["wide"].start_s >= by["small"].end_s
    assert 0 < res.utilization <= 1 and res.makespan_s == max(j.end_s for j in res.jobs)


def test_shape_folding_uses_scattered_blocks_that_packed_cannot():
    torus = load_cluster(EX / "torus-ocs-512.yaml")
    # eight 64-chip cubes: a = 0, b = 1 (long), c = 2; d needs 7 cubes. When a and c end, cubes 0 and 2-7
    # are free: the optical switches fold d onto them; a contiguous slice waits for b
    reqs = [JobRequest("a", "m", 64, steps=10), JobRequest("b", "m", 64, steps=100), JobRequest("c", "m", 64, steps=10),
            JobRequest("d", "m", 448, steps=10)]
    folded = place_jobs(torus, reqs, "shape-folding", stub)
    packed = place_jobs(torus, reqs, "packed", stub)
    d_f = next(j for j in folded.jobs if j.name == "d")
    d_p = next(j for j in packed.jobs if j.name == "d")
    assert d_f.start_s == 10 and d_p.start_s == 100
    assert all(j.slowdown == 0 for j in folded.jobs)           # a slice owns its links


def test_fragmentation():
    assert fragmentation([True] * 4, 2) == 0
    assert fragmentation([False, True, True, True], 2) == pytest.approx(1 / 3)
    assert fragmentation([True, True, False, False, True, True], 2, contiguous=True) == pytest.approx(0.5)


def test_perfetto_view_names_who_shares_which_uplink():
    res = place_jobs(cluster(), jobs(2, 2), "spread", stub)
    ev = perfetto(res)["traceEvents"]
    up = [e for e in ev if e.get("pid") == 2 and e["ph"] == "X"]
    assert up and all(set(e["args"]["jobs"]) == {"j0", "j1"} for e in up)


def test_cli_done_when_with_the_training_model(capsys, tmp_path):
    """The issue's bar on the example files, priced by predict: sharing -> slowdown, apart -> none."""
    trace = tmp_path / "t.json"
    args = ["place", str(EX / "jobs.yaml"), "--cluster", str(EX / "tapered-leaves.yaml"), "--json"]
    assert main(args + ["--policy", "spread", "--trace", str(trace)]) == 0
    spread = json.loads(capsys.readouterr().out)
    assert main(args + ["--policy", "topology-aware"]) == 0
    aware = json.loads(capsys.readouterr().out)
    assert spread["schema"] == 1 and json.loads(trace.read_text())["traceEvents"]
    for j in spread["jobs"]:
        assert (j["slowdown"] > 0.001) == bool(j["shares_uplinks_with"]), j
    assert any(j["slowdown"] > 0.05 for j in spread["jobs"])
    assert all(j["slowdown"] == 0 and not j["shares_uplinks_with"] for j in aware["jobs"])
    assert aware["makespan_s"] < spread["makespan_s"]


@pytest.mark.parametrize("text, args, field", [
    ("jobs: [{name: a, model: llama3-8b, num_gpus: 8}]", ["--policy", "best"], "policy"),
    ("jobs: [{name: a, model: llama3-8b, num_gpus: 8}]", ["--policy", "shape-folding"], "policy"),
    ("jobs: []", [], "jobs"),
    ("jobs: [{name: a, num_gpus: 8}]", [], "jobs[0]"),
    ("jobs: [{name: a, model: llama3-8b, num_gpus: 12}]", [], "num_gpus"),
    ("jobs: [{name: a, model: llama3-8b, num_gpus: 4096}]", [], "num_gpus"),
    ("jobs: [{name: a, model: llama3-8b, num_gpus: 8, kind: serving}]", [], "kind"),
    ("jobs: [{name: a, model: llama3-8b, num_gpus: 8}, {name: a, model: llama3-8b, num_gpus: 8}]", [], "name"),
    ("jobs: [{name: a, model: llama3-8b, num_gpus: 8, gpus: 2}]", [], "gpus"),
    ("jobs: [{name: a, model: llama3-8b, num_gpus: 8, arrival: soon}]", [], "arrival"),
    ("jobs: [{name: a, model: llama3-8b, num_gpus: 8, steps: 0}]", [], "steps"),
    ("jobs: [unclosed", [], "jobs"),
    ("jobs: [{name: a, model: no-such-model, num_gpus: 8}]", [], "model"),
    ("jobs: [{name: a, model: llama3-70b, num_gpus: 8, plan: \"tp=1\"}]", [], "plan"),
])
def test_bad_input_is_one_line(tmp_path, capsys, text, args, field):
    f = tmp_path / "jobs.yaml"
    f.write_text(text + "\n")
    code = main(["place", str(f), "--cluster", str(EX / "tapered-leaves.yaml"), *args])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert re.match(r"error: [^:;]+: .+", lines[0]) and field in lines[0].split(":", 2)[1], lines[0]


def test_unwritable_trace_is_one_line(capsys):
    code = main(["place", str(EX / "jobs.yaml"), "--cluster", str(EX / "tapered-leaves.yaml"),
                 "--trace", "/no/such/dir/t.json"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: trace:") and len(err.strip().splitlines()) == 1, err


def test_missing_jobs_file_is_one_line(capsys):
    code = main(["place", "no-such-jobs.yaml", "--cluster", "eos"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: jobs:"), err
