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
