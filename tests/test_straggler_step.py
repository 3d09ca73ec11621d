"""The step's wait for its slowest GPU (`stragglers`, schedule/stragglers.py): one formula for predict,
search, goodput and the command line; hand-checkable cases and invariants."""
from __future__ import annotations

import json

import pytest

import clustertwin as ct
from clustertwin.reliability import estimate_goodput
from clustertwin.schedule.stragglers import StragglerModel, expected_group_slowdown, job_group_slowdown
from clustertwin.specs.hardware import STRAGGLERS_OFF

PLAN = "tp=2,pp=1,dp=32,zero=1,recompute=none"


def _stretched(p) -> float:
    """What runs at the slowest GPU's pace, by hand: its stage's compute and recomputation and its
    optimizer step (not exposed communication, host time or the bubble, the other stages' work)."""
    b = p.breakdown_s
    return b["compute"] + b["recompute"] + b["optimizer"]


def test_one_gpu_waits_for_nobody() -> None:
    p = ct.predict("gpt3-1.3b", gpu="h100", num_gpus=1, plan="tp=1,pp=1,dp=1", micro_batch=1, global_batch=8,
                   seq_len=2048)
    assert p.breakdown_s["stragglers"] == 0.0
    assert expected_group_slowdown(1, 8, StragglerModel()) == 0.0


def test_the_wait_is_the_group_slowdown_times_what_stretches() -> None:
    """64 H100s (8 nodes of 8): the sourced model's slowest GPU over the mean, times the seconds that
    run at the GPU's pace (no pipeline: all of compute and the optimizer)."""
    p = ct.predict("llama3-8b", gpu="h100", num_gpus=64, plan=PLAN, micro_batch=1, global_batch=256, seq_len=8192)
    g = expected_group_slowdown(64, 8, StragglerModel())
    assert 0.017 < g < 0.031            # between the 8-GPU (1.7%) and 128-GPU (3.1%) figures
    b = p.breakdown_s
    assert b["stragglers"] == pytest.approx(g * (b["compute"] + b["recompute"] + b["optimizer"]), rel=1e-12)
    assert sum(b.values()) == pytest.approx(p.step_time_s, rel=1e-12)
    # exposed communication does not stretch
    assert b["stragglers"] < g * p.step_time_s


@pytest.mark.parametrize("plan,framework,gb", [
    ("tp=2,pp=4,dp=8,vpp=1", "megatron", 64),
    ("tp=2,pp=4,vpp=2,dp=8", "megatron", 64),
    # Llama 3's flexible interleaving with fewer micro-batches (2) than stages (8): a long bubble
    ("tp=2,pp=8,vpp=4,dp=4", "meta-llama3", 8),
])
def test_a_pipeline_stretches_the_slowest_stage_not_its_bubble(plan: str, framework: str, gb: int) -> None:
    """1F1B's step is m * t_slowest + (p-1)/v * t_mean: the slowest stage's m passes stretch, the bubble
    (the other stages' work) does not, however long it is."""
    p = ct.predict("llama3-8b", gpu="h100", num_gpus=64, plan=plan, micro_batch=1, global_batch=gb, seq_len=4096,
                   framework=framework)
    g = job_group_slowdown(p.job.cluster)
    assert p.breakdown_s["bubble"] > 0
    assert p.breakdown_s["stragglers"] == pytest.approx(g * _stretched(p), rel=1e-12)
    assert p.breakdown_s["stragglers"] < g * (p.mean_gpu_step_time_s - p.breakdown_s["bubble"])
    assert sum(p.breakdown_s.values()) == pytest.approx(p.step_time_s, rel=1e-12)


def test_more_gpus_never_wait_less_for_the_same_per_gpu_plan() -> None:
    """The same per-GPU work (tp=2, 8 micro-batches of one per replica) on 8 to 2,048 GPUs: the wait
    grows with the job (the slowest of more GPUs is slower), never shrinks."""
    waits, shares = [], []
    for n in (8, 16, 64, 256, 2048):
        dp = n // 2
        p = ct.predict("llama3-8b", gpu="h100", num_gpus=n, plan=f"tp=2,pp=1,dp={dp},zero=1", micro_batch=1,
                       global_batch=8 * dp, seq_len=4096)
        waits.append(p.breakdown_s["stragglers"])
        shares.append(expected_group_slowdown(n, 8, StragglerModel()))
    assert all(b >= a for a, b in zip(shares, shares[1:]))
    assert all(b >= a * 0.999 for a, b in zip(waits, waits[1:]))    # per-GPU compute the same: the wait follows
    assert waits[-1] > waits[0]


def test_off_gives_the_step_without_the_wait_exactly() -> None:
    kw = dict(gpu="h100", num_gpus=256, plan="tp=4,pp=2,dp=32", micro_batch=1, global_batch=512, seq_len=4096)
    on = ct.predict("llama3-70b", **kw)
    off = ct.predict("llama3-70b", **kw, stragglers=False)
    assert off.breakdown_s["stragglers"] == 0.0
    # the other parts are untouched, so the sum without the wait is the old step, to the last bit
    assert off.step_time_s == sum(v for k, v in on.breakdown_s.items() if k != "stragglers")
    assert on.mean_gpu_step_time_s == pytest.approx(off.step_time_s, rel=1e-12)
    assert on.step_time_s > off.step_time_s
    # a quieter fleet waits less; a noisier one more
    quiet = ct.predict("llama3-70b", **kw, stragglers={"gpu_speed_cv": 0.005})
    noisy = ct.predict("llama3-70b", **kw, stragglers={"gpu_speed_cv": 0.02})
    assert off.step_time_s < quiet.step_time_s < on.step_time_s < noisy.step_time_s


def test_the_cluster_carries_the_fleet() -> None:
    from clustertwin.jobs import resolve_cluster, with_stragglers
    c = resolve_cluster("h100", 64)
    assert c.stragglers == StragglerModel()
    assert with_stragglers(c, False).stragglers == STRAGGLERS_OFF and STRAGGLERS_OFF.off
    assert with_stragglers(c, {"thermal_slowdown": 0.03}).stragglers.thermal_slowdown == 0.03
    assert c.with_gpus(128).stragglers == c.stragglers
    with pytest.raises(ct.errors.ClusterTwinError, match="gpu_speed_cv"):
        with_stragglers(c, {"gpu_speed_cv": 0.9})
    with pytest.raises(ct.errors.ClusterTwinError, match="stragglers.cv"):
        with_stragglers(c, {"cv": 0.01})


def test_search_prices_the_same_wait_as_predict() -> None:
    """The vectorised pricer (not the search's final re-ranking, which calls predict) prices every
    candidate with the wait, and without it when the fleet has none, exactly as predict does."""
    from clustertwin.catalog import cluster_for_gpu, load_model
    from clustertwin.jobs import with_stragglers
    from clustertwin.predict import predict_job
    from clustertwin.schedule.batch import BatchPricer
    from clustertwin.search import make_space, search
    from clustertwin.specs import make_job
    model = load_model("llama3-8b")
    on = cluster_for_gpu("h100-sxm", 16)
    steps = {}
    for cluster in (on, with_stragglers(on, False)):
        sp = make_space(model, cluster, 32, 4096)
        structures, _, _ = sp.structures()
        for cand in BatchPricer(sp).run(structures, 12).candidates:
            pred = predict_job(make_job(model, cluster, cand.plan(sp), 4096))
            assert cand.step_time_s == pytest.approx(pred.step_time_s, rel=1e-12)
            assert (pred.breakdown_s["stragglers"] > 0) == (cluster is on)
            steps.setdefault(cand.plan(sp).model_dump_json(), []).append(cand.step_time_s)
    assert any(len(v) == 2 and v[0] > v[1] for v in steps.values())
    off = search("llama3-8b", gpu="h100", num_gpus=128, global_batch=256, seq_len=4096, top=1, stragglers=False)
    assert off.plans[0].prediction.breakdown_s["stragglers"] == 0.0


def test_goodput_counts_the_wait_once() -> None:
    """goodput's ideal is the step without the wait, and its straggler loss the same model's wait: the
    expected time of the default job is what it was when the step left stragglers to goodput (the
    step priced without them, goodput adding the sourced model)."""
    tokens = 1e12
    p = ct.predict()
    old_way = estimate_goodput(ct.predict(stragglers=False), tokens, gpu_speed_cv=0.01, thermal_slowdown=0.015)
    g = estimate_goodput(p, tokens)
    assert g.ideal_time_to_train_s == pytest.approx(old_way.ideal_time_to_train_s, rel=1e-12)
    assert g.expected_time_to_train_s == pytest.approx(old_way.expected_time_to_train_s, rel=1e-9)
    assert g.lost_s["stragglers"] == pytest.approx(g.steps * p.breakdown_s["stragglers"], rel=1e-9)
    assert g.ideal_step_time_s == pytest.approx(p.mean_gpu_step_time_s, rel=1e-12)
    assert g.step_time_s == p.step_time_s           # the run trains at predict's step, to the last bit
    # off: no wait, no loss
    none = estimate_goodput(p, tokens, stragglers=False)
    assert none.lost_s["stragglers"] == 0.0 and none.ideal_time_to_train_s == g.ideal_time_to_train_s


def test_command_line_flags(capsys) -> None:
    from clustertwin.cli import main
    base = ["predict", "--model", "llama3-8b", "--gpu", "h100", "-n", "64", "--plan", PLAN, "--json"]
    assert main(base) == 0
    on = json.loads(capsys.readouterr().out)
    assert main([*base, "--no-stragglers"]) == 0
    off = json.loads(capsys.readouterr().out)
    assert main([*base, "--straggler-cv", "0.02", "--thermal-slowdown", "0.03"]) == 0
    noisy = json.loads(capsys.readouterr().out)
    assert off["breakdown_s"]["stragglers"] == 0.0 < on["breakdown_s"]["stragglers"] < noisy["breakdown_s"]["stragglers"]
    assert off["step_time_s"] == pytest.approx(on["step_time_s"] - on["breakdown_s"]["stragglers"], rel=1e-12)
    assert any("slowest" in a for a in on["assumptions"])
    for bad in (["--straggler-cv", "0.9"], ["--thermal-slowdown", "-0.1"], ["--no-stragglers", "--straggler-cv", "0.01"]):
        assert main([*base, *bad]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and "\n" not in err


def test_heat_refuses_the_fleet_flags(capsys) -> None:
    """heat derives the node's thermal stragglers from --temps: the fleet's straggler flags would be
    silently ignored there, so they are refused in one line."""
    from clustertwin.cli import main
    temps = ["heat", "--temps", "60,62,64,66,68,70,72,74"]
    for bad in (["--thermal-slowdown", "0.02"], ["--no-stragglers"], ["--straggler-cv", "0.01"]):
        assert main([*temps, *bad]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and "--temps" in err and "\n" not in err
    assert main([*temps, "--json"]) == 0


def test_the_gpus_wait_for_the_host_does_not_stretch() -> None:
    """A small MoE layer's host waits for its token counts (a device-to-host read-back), so part of its
    'compute' is the GPU idle until the host issues the next kernels. A slower GPU does not stretch that:
    the wait is left out of what the slowest GPU paces, and faster NVLink (which moves time between
    ep_comm and that idle) never makes the step slower. The case hypothesis found in the core model's
    faster-hardware test (8 layers, 8 experts top-2, tp 2, ep 2, NeMo, 32 H100s)."""
    from clustertwin.catalog import cluster_for_gpu
    from clustertwin.reliability.stragglers import host_idle_s
    from clustertwin.specs import ModelSpec, make_plan
    m = ModelSpec(name="small-moe", num_layers=8, hidden_size=1024, num_heads=16, num_kv_heads=4,
                  ffn_hidden_size=2816, vocab_size=32000, max_seq_len=4096, activation="swiglu", norm="rmsnorm",
                  positions="rope", bias=False, moe_num_experts=8, moe_top_k=2)
    plan = make_plan(tp=2, ep=2, zero_stage=0, micro_batch=1, global_batch=16)
    c = cluster_for_gpu("h100-sxm", 32)
    base = ct.predict(m, cluster=c, plan=plan, seq_len=512, framework="nemo")
    b = base.breakdown_s
    idle = host_idle_s(base)
    assert idle > 0
    g = job_group_slowdown(base.job.cluster)
    assert b["stragglers"] == pytest.approx(g * (b["compute"] + b["recompute"] - idle + b["optimizer"]), rel=1e-12)
    for k in (1.1, 2.0, 16.0):
        node = c.node.model_copy(update={"scaleup_bandwidth_bytes_per_s": c.node.gpu_scaleup_bandwidth * k})
        fast = ct.predict(m, cluster=c.model_copy(update={"node": node}), plan=plan, seq_len=512, framework="nemo")
        assert fast.step_time_s <= base.step_time_s * (1 + 1e-12)
