"""MoE routing imbalance: the busiest expert-parallel rank sets the pace (workload/moe.py)."""
from __future__ import annotations

import math

import pytest

import clustertwin as ct
from clustertwin.errors import ClusterTwinError
from clustertwin.workload.moe import expert_shares, load_factor, rank_shares


def test_uniform_routing_leaves_only_sampling_noise():
    f, dropped = load_factor("uniform", "sequential", 64, 8, 8, 4096)
    n = 4096 * 8 * 8
    q = 1 / 8
    expected = 1 + math.sqrt(n * q * (1 - q)) * math.sqrt(2 * math.log(8)) / (n * q)
    assert f == pytest.approx(expected, rel=1e-12) and dropped == 0.0
    assert load_factor("uniform", "sequential", 64, 8, 1, 4096) == (1.0, 0.0)
    # more tokens, smaller relative noise
    assert load_factor("uniform", "sequential", 64, 8, 8, 65536)[0] < f


def test_zipf_skew_and_placement():
    shares = expert_shares("zipf:1.0", 8)
    assert sum(shares) == pytest.approx(1.0) and shares[0] == pytest.approx(1 / sum(1 / i for i in range(1, 9)))
    seq = rank_shares(expert_shares("zipf:1.0", 64), 8, "sequential")
    bal = rank_shares(expert_shares("zipf:1.0", 64), 8, "balanced")
    assert max(bal) < max(seq) and sum(bal) == pytest.approx(1.0)
    f_seq = load_factor("zipf:1.0", "sequential", 64, 8, 8, 4096)[0]
    f_bal = load_factor("zipf:1.0", "balanced", 64, 8, 8, 4096)[0]
    f_uni = load_factor("uniform", "sequential", 64, 8, 8, 4096)[0]
    assert f_seq > f_bal >= f_uni > 1.0


def test_capacity_factor_caps_and_drops():
    f, dropped = load_factor("zipf:1.2", "sequential", 64, 8, 8, 4096, 1.25)
    assert f == 1.25 and 0 < dropped < 1
    assert load_factor("uniform", "sequential", 64, 8, 8, 4096, 4.0)[1] == 0.0


def test_histogram_file(tmp_path):
    h = tmp_path / "hist.json"
    h.write_text("[4, 1, 1, 1, 1, 1, 1, 1]")
    q = rank_shares(expert_shares(str(h), 8), 4, "sequential")
    assert q[0] == pytest.approx(5 / 11)
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ClusterTwinError, match="plan.moe_routing"):
        expert_shares(str(bad), 8)


def _mixtral(routing: str, placement: str = "sequential"):
    return ct.predict("mixtral-8x7b", gpu="h100", num_gpus=64,
                      plan=f"tp=1,pp=1,ep=8,zero=1,moe_routing={routing},moe_placement={placement}",
                      micro_batch=1, global_batch=128, seq_len=4096)


def test_imbalance_is_a_breakdown_part_that_grows_with_skew():
    uni, skew = _mixtral("uniform"), _mixtral("zipf:1.0")
    for r in (uni, skew):
        assert sum(r.breakdown_s.values()) == pytest.approx(r.step_time_s, rel=1e-12)
    assert 0 < uni.breakdown_s["moe_imbalance"] < skew.breakdown_s["moe_imbalance"]
    assert skew.step_time_s > uni.step_time_s
    # everything but the imbalance is priced at the balanced load
    for k in ("compute", "ep_comm"):
        assert skew.breakdown_s[k] == pytest.approx(uni.breakdown_s[k], rel=1e-12)
    j = skew.to_json()["moe"]
    assert j["load_factor"] > 2 and j["imbalance_s"] == pytest.approx(skew.breakdown_s["moe_imbalance"])


def test_dense_models_have_no_imbalance():
    r = ct.predict("llama3-8b", gpu="h100", num_gpus=8, plan="tp=1", global_batch=8, micro_batch=1, seq_len=2048)
    assert r.breakdown_s["moe_imbalance"] == 0.0 and "moe" not in r.to_json()


@pytest.mark.parametrize("routing,field", [("zipf:abc", "plan.moe_routing"), ("no/such/hist.json", "plan.moe_routing")])
def test_bad_routing_is_one_line(routing, field):
    with pytest.raises(ClusterTwinError) as e:
        _mixtral(routing)
    assert e.value.field == field and "\n" not in e.value.one_line()


# ---- node-deduplicating dispatch (DeepSeek-V3 Sec. 3.2.2, DeepEP) -------------------------------------

from clustertwin.cost.network import NetworkPricer, expected_target_nodes  # noqa: E402
from clustertwin.parallel import place_group  # noqa: E402
from clustertwin.calibrate.profile import profile_for  # noqa: E402
from clustertwin.catalog import cluster_for_gpu  # noqa: E402
from clustertwin.specs import ModelSpec  # noqa: E402


def test_expected_target_nodes_by_hand():
    assert expected_target_nodes(1, 8) == pytest.approx(1.0)
    assert expected_target_nodes(8, 1) == pytest.approx(1.0)
    assert expected_target_nodes(2, 2) == pytest.approx(1.5)                        # 2 * (1 - 1/4)
    # DeepSeek-V3: one group per node, a token's experts on its best 4 groups -> at most 4 nodes
    assert expected_target_nodes(8, 8, 8, 4) == pytest.approx(4 * (1 - 0.75 ** 8))
    assert expected_target_nodes(8, 8, 8, 4) < expected_target_nodes(8, 8) < 8
    # 8 groups over 16 nodes: a group spans 2 nodes, 4 groups reach 8
    assert expected_target_nodes(8, 16, 8, 4) == pytest.approx(8 * (1 - (7 / 8) ** 8))


def test_dedup_dispatch_sends_less_over_the_nics_and_the_same_within_a_node():
    cluster = cluster_for_gpu("h100-sxm", 64)
    net = NetworkPricer(cluster, profile_for(cluster.gpu))
    across = place_group(64, 1, 8)
    within = place_group(8, 1, 8)
    nbytes = 512e6
    assert net.time("all_to_all", nbytes, across, (8, 0, 0)) < net.time("all_to_all", nbytes, across)
    assert net.time("all_to_all", nbytes, across, (8, 8, 4)) < net.time("all_to_all", nbytes, across, (8, 0, 0))
    assert net.time("all_to_all", nbytes, within, (8, 8, 4)) == net.time("all_to_all", nbytes, within)


def _deepseek(dispatcher: str):
    return ct.predict("deepseek-v3", gpu="h100", num_gpus=512,
                      plan=f"tp=1,pp=8,first=7,last=6,ep=64,rc=full,dispatcher={dispatcher}",
                      micro_batch=1, global_batch=256, seq_len=4096)


def test_deepep_dispatch_lowers_the_ep_time_of_an_ep_group_across_nodes():
    a2a, dedup = _deepseek("alltoall"), _deepseek("deepep")
    assert dedup.graph.plan.moe_dispatcher == "deepep" and a2a.graph.plan.moe_dispatcher == "alltoall"
    assert 0 < dedup.breakdown_s["ep_comm"] < 0.7 * a2a.breakdown_s["ep_comm"]
    # DeepEP groups the received tokens by expert once; the all-to-all dispatcher also re-sorts the
    # received chunks by local expert and back (permutation 2): more compute, never less
    assert dedup.breakdown_s["compute"] < a2a.breakdown_s["compute"]
    assert dedup.step_time_s < a2a.step_time_s


def test_framework_default_dispatcher_is_alltoall():
    p = ct.predict("mixtral-8x7b", gpu="h100", num_gpus=16, plan="tp=1,ep=8", micro_batch=1, global_batch=32,
                   seq_len=4096)
    assert p.job.plan.moe_dispatcher is None and p.graph.plan.moe_dispatcher == "alltoall"


def test_expert_groups_must_fit_the_experts():
    base = dict(name="m", num_layers=2, hidden_size=256, num_heads=4, ffn_hidden_size=512, vocab_size=1000,
                max_seq_len=512, moe_num_experts=16, moe_top_k=2)
    assert ModelSpec(**base, moe_expert_groups=4, moe_topk_groups=2).moe_expert_groups == 4
    for groups, topk in ((3, 1), (4, 0), (4, 5)):
        with pytest.raises(ClusterTwinError, match="moe_expert_groups"):
            ModelSpec(**base, moe_expert_groups=groups, moe_topk_groups=topk)
