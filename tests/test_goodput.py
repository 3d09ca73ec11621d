"""Goodput: failure model, recovery model, stragglers, analytic time-to-train vs Monte Carlo,
the Llama 3 405B check, the plan choice that failures change, and the `goodput` command."""
from __future__ import annotations

import json
import math
from functools import lru_cache

import pytest

from clustertwin import predict
from clustertwin.catalog import load_cluster
from clustertwin.cli import main
from clustertwin.errors import ClusterTwinError
from clustertwin.reliability import (COMPONENTS, PRESETS, CheckpointConfig, StragglerModel, checkpoint_costs,
                                     daly_interval_s, estimate_goodput, expected_group_slowdown, load_failure_model,
                                     simulate, slow_node_impact, young_interval_s)
from clustertwin.reliability.failures import LLAMA3_PLANNED, LLAMA3_TABLE5, LLAMA3_UNEXPECTED
from clustertwin.reliability.goodput import expected_time, optimal_interval_steps

HOUR = 3600.0
DAY = 86400.0


# ---- shared predictions (each takes ~0.1 s) -------------------------------------------------------

@lru_cache(maxsize=None)
def llama3_405b():
    """Llama 3 405B as Meta ran it (arXiv 2407.21783 Table 4): 16,384 H100s, TP 8, CP 1, PP 16, DP 128,
    sequence 8,192, 16M tokens per step (2,048 sequences), interleaved pipeline."""
    return predict("llama3.1-405b", cluster="meta-llama3-24k", num_gpus=16384,
                   plan="tp=8,pp=16,vpp=4,dp=128,cp=1,sp=1,zero=1", micro_batch=1, global_batch=2048, seq_len=8192)


@lru_cache(maxsize=None)
def llama3_8b():
    return predict("llama3-8b", gpu="h100", num_gpus=1024, plan="tp=2,pp=1,zero=1", micro_batch=1,
                   global_batch=1024, seq_len=8192)


def h100_cluster(n: int):
    return load_cluster("meta-llama3-24k").with_gpus(n)


# ---- 1. failure model -----------------------------------------------------------------------------

def test_llama3_table5_is_the_default_and_reproduces_the_published_rate():
    assert sum(sum(rows.values()) for rows in LLAMA3_TABLE5.values()) == LLAMA3_UNEXPECTED == 419
    m = load_failure_model(None)
    assert m.name == "llama3"
    c = h100_cluster(16384)
    # 419 unexpected interruptions in 54 days on 16,384 GPUs: one every 3.09 hours
    assert m.job_mtbf_s(c) == pytest.approx(54 * 24 * HOUR / 419, rel=1e-9)
    assert m.planned_rate_per_s(c) * 54 * DAY == pytest.approx(LLAMA3_PLANNED)
    # GPUs (incl. HBM) are the largest share, as the paper says (58.7% of unexpected interruptions)
    rates = m.job_rates_per_s(c)
    assert (rates["gpu"] + rates["hbm"]) / sum(rates.values()) == pytest.approx((196 + 72) / 419)
    assert set(rates) <= set(COMPONENTS)


def test_job_failure_rate_scales_with_the_components_held():
    m = load_failure_model("llama3")
    assert m.job_mtbf_s(h100_cluster(8192)) == pytest.approx(2 * m.job_mtbf_s(h100_cluster(16384)))
    # fewer NICs per node: fewer NIC and cable failures, the rest unchanged
    c = h100_cluster(1024)
    fewer_nics = c.model_copy(update={"node": c.node.model_copy(update={"nics_per_node": 4})})
    a, b = m.job_rates_per_s(c), m.job_rates_per_s(fewer_nics)
    assert b["nic"] == pytest.approx(a["nic"] / 2) and b["network"] == pytest.approx(a["network"] / 2)
    assert b["gpu"] == a["gpu"] and b["host"] == a["host"]


def test_kokolis_preset_projects_their_published_mttf():
    # Kokolis et al. 2025: r_f = 6.50 / 1000 node-days projects 1.8 h at 16,384 GPUs and 0.23 h at 131,072
    m = load_failure_model("kokolis-rsc1")
    assert m.job_mtbf_s(h100_cluster(16384)) / HOUR == pytest.approx(1.8, abs=0.01)
    big = h100_cluster(8).model_copy(update={"num_nodes": 131072 // 8})
    assert m.job_mtbf_s(big) / HOUR == pytest.approx(0.23, abs=0.01)
    assert set(PRESETS) >= {"llama3", "kokolis-rsc1", "kokolis-rsc2", "opt-175b"}
    # the OPT-175B era fleet fails more often per node than Llama 3's
    assert load_failure_model("opt-175b").job_mtbf_s(h100_cluster(1024)) < load_failure_model("llama3").job_mtbf_s(h100_cluster(1024))


def test_megascale_consistency():
    # MegaScale (arXiv 2402.15627): 100+ automatic recoveries over several weeks on >10,000 GPUs.
    m = load_failure_model("llama3")
    three_weeks = 21 * DAY / m.job_mtbf_s(h100_cluster(12288))
    assert 100 < three_weeks < 200


def test_overrides_mtbf_rates_and_yaml(tmp_path):
    c = h100_cluster(2048)
    m = load_failure_model("llama3").with_job_mtbf(2 * HOUR, c)
    assert m.job_mtbf_s(c) == pytest.approx(2 * HOUR)
    m2 = load_failure_model("llama3").with_rates({"gpu": 1e-4})
    assert m2.rates_per_unit_hour["gpu"] == 1e-4
    f = tmp_path / "fleet.yaml"
    f.write_text("name: my-fleet\nsource: test\nbase: llama3\nscale: 2\nrates_per_unit_hour: {hbm: 1.0e-5}\n"
                 "components: {cooling: {unit: node, rate_per_unit_hour: 1.0e-4}}\nplanned_per_node_hour: 0\n")
    y = load_failure_model(str(f))
    assert y.name == "my-fleet" and y.unit_of("cooling") == "node"
    assert y.rates_per_unit_hour["hbm"] == pytest.approx(2e-5)
    assert y.rates_per_unit_hour["gpu"] == pytest.approx(2 * load_failure_model("llama3").rates_per_unit_hour["gpu"])
    assert y.job_rates_per_s(c)["cooling"] == pytest.approx(1e-4 * 2 * c.num_nodes / 3600)
    g = estimate_goodput(llama3_8b(), 1e11, failure_model=str(f))
    assert g.failure_model == "my-fleet"


@pytest.mark.parametrize("bad", [0, -1e-5, float("nan"), float("inf"), "x"])
def test_bad_rates_are_one_line_errors(bad):
    with pytest.raises(ClusterTwinError) as e:
        load_failure_model("llama3").with_rates({"gpu": bad})
    assert "\n" not in str(e.value) and "failure_rates.gpu" in str(e.value)


def test_bad_failure_inputs(tmp_path):
    for call in (lambda: load_failure_model("nope"),
                 lambda: load_failure_model("llama3").with_rates({"flux_capacitor": 1e-5}),
                 lambda: load_failure_model("llama3").with_job_mtbf(0, h100_cluster(8)),
                 lambda: estimate_goodput(llama3_8b(), 1e11, mtbf_s=-5),
                 lambda: estimate_goodput(llama3_8b(), 1e11, mtbf_s="0h")):
        with pytest.raises(ClusterTwinError) as e:
            call()
        assert "\n" not in str(e.value)
    bad = tmp_path / "bad.yaml"
    bad.write_text("rates_per_unit_hour: {gpu: 0}\n")
    with pytest.raises(ClusterTwinError, match="rates_per_unit_hour.gpu"):
        load_failure_model(str(bad))


# ---- 2. recovery model ----------------------------------------------------------------------------

def test_checkpoint_size_is_weights_plus_optimizer_of_every_parameter():
    p = llama3_405b()
    c = checkpoint_costs(p, CheckpointConfig())
    assert c.bytes_total == pytest.approx(p.job.model.params_total * 14, rel=0.002)   # bf16 + fp32 master, m, v
    assert c.bytes_per_gpu_max * p.job.cluster.num_gpus == pytest.approx(c.bytes_total, rel=0.01)  # fully parallel
    # Llama 3 sec. 3.3.1: "each GPU's model state, ranging from 1 MB to 4 GB per GPU"
    assert 1e6 < c.bytes_per_gpu_max < 4e9
    moe = predict("mixtral-8x7b", gpu="h100", num_gpus=64, plan="tp=2,pp=1,ep=8,zero=1", micro_batch=1,
                  global_batch=256, seq_len=4096)
    assert checkpoint_costs(moe, CheckpointConfig()).bytes_total == pytest.approx(moe.job.model.params_total * 14, rel=0.002)


def test_checkpoint_modes_and_writers():
    p = llama3_8b()
    sync = checkpoint_costs(p, CheckpointConfig(mode="sync"))
    asyn = checkpoint_costs(p, CheckpointConfig(mode="async"))
    mem = checkpoint_costs(p, CheckpointConfig(mode="in-memory"))
    cfg = CheckpointConfig()
    pageable = sync.bytes_per_gpu_max / cfg.pageable_copy_bytes_per_s
    assert asyn.blocking_s < sync.blocking_s and asyn.persist_s + pageable == pytest.approx(sync.save_s)
    assert sync.persist_s == 0 and mem.blocking_s <= asyn.blocking_s
    legacy = checkpoint_costs(p, CheckpointConfig(writers="dp-rank-0"))
    assert legacy.bytes_total == pytest.approx(sync.bytes_total)
    assert legacy.bytes_per_gpu_max > 100 * sync.bytes_per_gpu_max and legacy.save_s > sync.save_s
    slow = checkpoint_costs(p, CheckpointConfig(storage_write_bandwidth_bytes_per_s=1e9))
    assert slow.save_s == pytest.approx(pageable + sync.bytes_total / 1e9)


def test_synchronous_part_of_a_checkpoint_is_the_copy_and_the_serialisation():
    # sync: the pageable copy (torch.save) then serialisation streamed to storage, the slower setting the pace;
    # async (DCP async_save, CheckFreq's snapshot): only the pinned copy at PCIe bandwidth stalls;
    # async-serialized (torch.save to host, then upload: GEMINI's HighFreq): copy + serialisation stall
    p = llama3_8b()
    cfg = CheckpointConfig()
    shard = checkpoint_costs(p, cfg).bytes_per_gpu_max
    copy, ser = shard / cfg.pageable_copy_bytes_per_s, shard / cfg.serialize_bytes_per_s
    fast = CheckpointConfig(storage_write_bandwidth_bytes_per_s=1e15, node_storage_bandwidth_bytes_per_s=1e15)
    assert checkpoint_costs(p, fast).blocking_s == pytest.approx(copy + ser, rel=1e-6)   # serialisation bound
    sync = checkpoint_costs(p, cfg)
    to_storage = checkpoint_costs(p, CheckpointConfig(serialize_bytes_per_s=1e18)).blocking_s - copy
    assert sync.blocking_s == pytest.approx(copy + max(ser, to_storage))
    staged = checkpoint_costs(p, CheckpointConfig(mode="async-serialized"))
    assert staged.blocking_s == pytest.approx(copy + ser) and staged.persist_s == pytest.approx(to_storage)
    asyn = checkpoint_costs(p, CheckpointConfig(mode="async"))
    assert asyn.blocking_s == pytest.approx(shard / p.job.cluster.gpu.pcie_bandwidth_bytes_per_s)
    # what async and in-memory checkpointing remove: each stalls no more than the next heavier scheme
    mem = checkpoint_costs(p, CheckpointConfig(mode="in-memory"))
    assert mem.blocking_s <= asyn.blocking_s < staged.blocking_s <= sync.blocking_s
    # a faster serialiser never stalls longer
    quick = checkpoint_costs(p, CheckpointConfig(mode="async-serialized", serialize_bytes_per_s=1e10))
    assert quick.blocking_s < staged.blocking_s
    # the rates are options of estimate_goodput, and a bad one is a one-line error
    g = estimate_goodput(p, 1e11, checkpoint_mode="async-serialized", serialize_bytes_per_s="10GB/s")
    assert g.checkpoint.blocking_s == pytest.approx(quick.blocking_s)
    with pytest.raises(ClusterTwinError, match="serialize_bytes_per_s"):
        estimate_goodput(p, 1e11, serialize_bytes_per_s=0)


def test_in_memory_checkpoint_rides_the_network_idle_time():
    """GEMINI sec. 3.2: the copy to the peer fills the spans training leaves the network idle; it stalls
    training only by what does not fit."""
    from clustertwin.reliability.checkpoint import network_idle_s
    p = llama3_8b()
    mem = checkpoint_costs(p, CheckpointConfig(mode="in-memory"))
    node_bw = p.job.cluster.node.node_nic_bandwidth
    # the idle spans of the step at the mean GPU speed: the slowest GPU's node computes through the wait
    assert mem.bytes_per_node_max / node_bw < network_idle_s(p) <= p.mean_gpu_step_time_s < p.step_time_s
    assert mem.blocking_s == 0 and mem.persist_s == pytest.approx(p.mean_gpu_step_time_s)
    # a slow network: the DP traffic fills the step and the copy no longer fits
    from clustertwin.catalog import load_cluster
    c = load_cluster("dgx-h100-superpod")
    slow_node = c.node.model_copy(update={"nics_per_node": 1, "nic_bandwidth_bytes_per_s": 1e8})
    q = predict("llama3-8b", cluster=c.model_copy(update={"node": slow_node, "num_nodes": 128}), num_gpus=1024,
                plan="tp=2,pp=1,zero=1", micro_batch=1, global_batch=1024, seq_len=8192)
    m2 = checkpoint_costs(q, CheckpointConfig(mode="in-memory"))
    peer = m2.bytes_per_node_max / q.job.cluster.node.node_nic_bandwidth
    assert peer > network_idle_s(q)
    assert m2.blocking_s == pytest.approx(peer - network_idle_s(q)) and m2.persist_s == 0


def test_interval_shorter_than_a_save_is_an_error():
    p = llama3_8b()
    with pytest.raises(ClusterTwinError) as e:
        estimate_goodput(p, 1e12, checkpoint_interval_s="30s", storage_write_bandwidth_bytes_per_s="1GB/s")
    assert "checkpoint_interval" in str(e.value) and "shorter than one checkpoint save" in str(e.value)
    g = estimate_goodput(p, 1e12, checkpoint_interval_s="30min")
    assert g.interval_source == "given" and g.checkpoint_interval_s == pytest.approx(1800, rel=0.01)
    with pytest.raises(ClusterTwinError):
        estimate_goodput(p, 1e12, checkpoint_interval_s=0)


def test_tokens_validation():
    p = llama3_8b()
    for bad in (0, -1, float("inf"), "lots", 1e300):
        with pytest.raises(ClusterTwinError) as e:
            estimate_goodput(p, bad)
        assert "tokens" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ClusterTwinError, match="goodput.bogus"):
        estimate_goodput(p, 1e12, bogus=1)
    assert estimate_goodput(p, "15T").tokens == 15e12


# ---- analytic model -------------------------------------------------------------------------------

def test_lost_time_sums_and_goodput_definition():
    g = estimate_goodput(llama3_8b(), 2e12, mtbf_s=2 * HOUR)
    assert set(g.lost_s) == {"checkpointing", "rework", "restart", "stragglers"}
    assert all(v >= 0 for v in g.lost_s.values())
    assert sum(g.lost_s.values()) == pytest.approx(g.expected_time_to_train_s - g.ideal_time_to_train_s, rel=1e-9)
    assert g.goodput == pytest.approx(g.ideal_time_to_train_s / g.expected_time_to_train_s)
    assert g.ideal_time_to_train_s == pytest.approx(g.steps * g.ideal_step_time_s)
    assert g.step_time_s == pytest.approx(g.ideal_step_time_s * (1 + g.straggler_slowdown), rel=1e-12)
    data = g.to_json()
    for key in ("schema", "step_time_s", "ideal_time_to_train_s", "expected_time_to_train_s", "goodput",
                "checkpoint_interval_s", "expected_failures", "lost_s"):
        assert key in data
    assert data["schema"] == 1
    json.dumps(data)  # plain JSON


def test_more_failures_cost_more_and_no_failures_cost_nothing():
    p = llama3_8b()
    times = [estimate_goodput(p, 1e12, mtbf_s=m * HOUR, stragglers=False).expected_time_to_train_s
             for m in (100000, 24, 4, 1)]
    assert times == sorted(times)
    rare = estimate_goodput(p, 1e12, mtbf_s=1e9 * HOUR, stragglers=False, planned_interruptions=False)
    assert rare.goodput == pytest.approx(1.0, abs=1e-4)


def test_reduces_to_dalys_closed_form():
    # synchronous checkpoints, one restart time, no planned interruptions: Daly (2006)
    g = estimate_goodput(llama3_8b(), 1e12, mtbf_s=HOUR, stragglers=False, planned_interruptions=False,
                         hot_spares=0, detection_s=0, init_s=0, warmup_steps=0, reschedule_s=0)
    p = g.params
    lam, C, R = p.rate_per_s, p.blocking_s, p.restart_values_s[0]
    assert len(set(p.restart_values_s)) == 1
    daly = p.work_s / p.tau_s * math.exp(lam * R) * (math.exp(lam * (p.tau_s + C)) - 1) / lam
    assert g.expected_time_to_train_s == pytest.approx(daly, rel=1e-9)


def test_optimal_interval_beats_young_and_daly_and_neighbours():
    g = estimate_goodput(llama3_8b(), 1e12, mtbf_s=3 * HOUR, storage_write_bandwidth_bytes_per_s="20GB/s")
    p = g.params
    k = g.checkpoint_interval_steps
    t = lambda kk: expected_time(p.with_interval(kk)).total_s  # noqa: E731
    assert t(k) <= t(k - 1) and t(k) <= t(k + 1)
    assert g.goodput >= g.goodput_at_young
    # C << MTBF: Young and Daly land next to the exact optimum
    assert g.young_interval_s == pytest.approx(young_interval_s(p.blocking_s, 3 * HOUR))
    assert g.checkpoint_interval_s == pytest.approx(g.young_interval_s, rel=0.1)
    assert g.checkpoint_interval_s == pytest.approx(daly_interval_s(p.blocking_s, 3 * HOUR), rel=0.1)
    assert g.goodput - g.goodput_at_young < 1e-3
    assert optimal_interval_steps(p, g.steps) == k


def test_async_and_hot_spares_help():
    p = llama3_8b()
    base = dict(mtbf_s=HOUR, storage_write_bandwidth_bytes_per_s="5GB/s")
    sync = estimate_goodput(p, 1e12, **base)
    asyn = estimate_goodput(p, 1e12, checkpoint_mode="async", **base)
    mem = estimate_goodput(p, 1e12, checkpoint_mode="in-memory", **base)
    assert asyn.expected_time_to_train_s < sync.expected_time_to_train_s
    assert mem.expected_time_to_train_s < sync.expected_time_to_train_s
    # a failure an hour, 77% of them replacing a node that takes a day to repair: ~18 nodes are out at
    # any time, so 4 spares are almost never free and 40 almost always are
    few = estimate_goodput(p, 1e12, hot_spares=4, **base)
    many = estimate_goodput(p, 1e12, hot_spares=40, **base)
    assert few.restart.spare_available < 0.01 < 0.99 < many.restart.spare_available
    assert many.restart.mean_s < few.restart.mean_s <= sync.restart.mean_s
    assert many.expected_time_to_train_s < sync.expected_time_to_train_s
    quick_repair = estimate_goodput(p, 1e12, hot_spares=4, repair_s="1h", **base)
    assert quick_repair.restart.spare_available > 0.99


def test_infeasible_run_is_reported_not_crashed():
    g = estimate_goodput(llama3_8b(), 1e12, mtbf_s=0.5)   # two failures a second, ten-minute restarts
    assert not g.feasible and g.goodput < 1e-3
    ok = estimate_goodput(llama3_8b(), 1e12, mtbf_s=HOUR)
    assert ok.feasible


# ---- 3. stragglers --------------------------------------------------------------------------------

def test_group_slowdown_grows_with_group_size():
    m = StragglerModel()
    sizes = [1, 8, 64, 1024, 16384]
    s = [expected_group_slowdown(n, 8, m) for n in sizes]
    assert s[0] == 0.0 and s == sorted(s) and s[-1] < 0.1
    # cv = 0: only the thermal straggler of each node remains (minus the mean's share of it)
    only_thermal = StragglerModel(gpu_speed_cv=0.0, thermal_slowdown=0.02)
    assert expected_group_slowdown(64, 8, only_thermal) == pytest.approx(0.02 - 0.02 / 8)
    # one slow node in ten: a big group almost surely holds one
    slow = StragglerModel(gpu_speed_cv=0.0, thermal_slowdown=0.0, slow_node_fraction=0.1, slow_node_slowdown=0.1)
    assert expected_group_slowdown(8192, 8, slow) == pytest.approx(0.1 - 0.01, abs=1e-6)


def test_slow_node_effect_on_groups():
    p = llama3_405b()
    imp = slow_node_impact(p, 0.10)
    m = p.graph.num_microbatches
    assert imp["tp_group"] == pytest.approx(0.10)
    assert imp["pipeline"] == pytest.approx(0.10 * m / (m + 15 / 4))
    assert imp["dp"] == pytest.approx(imp["pipeline"])           # every replica waits at the gradient sync
    assert 0 < imp["step"] < 0.10
    with pytest.raises(ClusterTwinError):
        slow_node_impact(p, -0.1)


def test_stragglers_enter_time_to_train():
    p = llama3_8b()
    on = estimate_goodput(p, 1e12)
    off = estimate_goodput(p, 1e12, stragglers=False)
    assert off.lost_s["stragglers"] == 0 and on.lost_s["stragglers"] > 0
    assert on.expected_time_to_train_s > off.expected_time_to_train_s


# ---- 4. Monte Carlo vs analytic (docs/goodput.md, "Monte Carlo scenario") ------------------------------

def test_monte_carlo_agrees_with_analytic_on_the_documented_scenario():
    # Llama 3 405B on 16,384 H100s, 15.6T tokens, default failure/checkpoint/restart/straggler models
    g = estimate_goodput(llama3_405b(), 15.6e12, monte_carlo_runs=400, seed=2024)
    mc = g.monte_carlo
    assert abs(mc.mean_s / g.expected_time_to_train_s - 1) < 0.02
    assert abs(mc.mean_failures / g.expected_failures - 1) < 0.02
    assert mc.ci95_s[0] < mc.mean_s < mc.ci95_s[1] and mc.p5_s < mc.p50_s < mc.p95_s
    for k in ("checkpointing", "rework", "restart"):
        assert mc.lost_s[k] == pytest.approx(g.lost_s[k], rel=0.05)


def test_monte_carlo_agrees_when_failures_dominate():
    # a failure every 30 min against ~10 min restarts and async checkpoints that take a minute to persist
    g = estimate_goodput(llama3_8b(), 3e11, mtbf_s=1800, checkpoint_mode="async",
                         storage_write_bandwidth_bytes_per_s="2GB/s", monte_carlo_runs=1000, seed=7)
    assert g.goodput < 0.8
    assert abs(g.monte_carlo.mean_s / g.expected_time_to_train_s - 1) < 0.02
    again = simulate(g.params, runs=1000, seed=7, ideal_s=g.ideal_time_to_train_s)
    assert again.mean_s == g.monte_carlo.mean_s                       # a fixed seed replays the same runs
    with pytest.raises(ClusterTwinError):
        simulate(g.params, runs=0)


# ---- 6. the public record: Llama 3 405B --------------------------------------------------------------

def test_llama3_405b_effective_training_time_matches_the_paper():
    # Llama 3 sec. 3.3.4: "higher than 90% effective training time" with 466 interruptions in 54 days.
    g = estimate_goodput(llama3_405b(), 15.6e12)
    assert 0.90 <= g.effective_training_time_ratio <= 0.95
    # the model's interruption rate is the paper's: (419 + 47) in 54 days
    per_54_days = (g.expected_failures + g.expected_planned_interruptions) / g.expected_time_to_train_s * 54 * DAY
    assert per_54_days == pytest.approx(466, rel=0.01)
    assert g.mtbf_s / HOUR == pytest.approx(3.09, abs=0.01)


# ---- 5. failures change the best plan -----------------------------------------------------------

def _plan(plan: str):
    return predict("llama3-70b", gpu="h100", num_gpus=2048, plan=plan, micro_batch=1, global_batch=1024,
                   seq_len=8192)


def test_best_plan_by_goodput_differs_from_best_by_step_time():
    """docs/goodput.md, "Failures change the plan": Megatron's legacy checkpoint format (data-parallel
    replica 0 writes everything) on a 25 Gb/s per-node storage path, OPT-175B-era failure rates. Plan A
    (pp=1) has the shorter step, but its checkpoint goes through one node; plan B (pp=16) writes
    through 16 and trains sooner."""
    a = _plan("tp=8,pp=1,sp=1,zero=1,recompute=full")
    b = _plan("tp=8,pp=16,sp=1,zero=1,recompute=selective")
    assert a.fits and b.fits
    scenario = dict(checkpoint_writers="dp-rank-0", node_storage_bandwidth_bytes_per_s="25Gbps",
                    failure_model="opt-175b")
    ga, gb = estimate_goodput(a, 2e12, **scenario), estimate_goodput(b, 2e12, **scenario)
    assert a.step_time_s < b.step_time_s                                        # best by step time: A
    assert ga.expected_time_to_train_s > gb.expected_time_to_train_s            # best by goodput: B
    assert ga.checkpoint.save_s > 10 * gb.checkpoint.save_s                     # why: A's checkpoint is slow
    assert ga.lost_s["checkpointing"] + ga.lost_s["rework"] > gb.lost_s["checkpointing"] + gb.lost_s["rework"]
    # with a fully parallel save (the default) the ranking follows the step time again
    da = estimate_goodput(a, 2e12, failure_model="opt-175b")
    db = estimate_goodput(b, 2e12, failure_model="opt-175b")
    assert da.expected_time_to_train_s < db.expected_time_to_train_s


def test_search_objective_goodput_picks_another_plan():
    """The same case through `search` (its Python API: its CLI has no flags for the goodput options):
    Llama 3 70B on 2,048 H100s, legacy checkpoint format over 10 Gb/s per node, OPT-175B-era failures."""
    search_mod = pytest.importorskip("clustertwin.search")
    scenario = dict(checkpoint_writers="dp-rank-0", node_storage_bandwidth_bytes_per_s="10Gbps",
                    failure_model="opt-175b")
    kw = dict(gpu="h100", num_gpus=2048, global_batch=1024, seq_len=8192, top=3, pareto_points=1)
    by_time = search_mod.search("llama3-70b", objective="time", **kw).plans[0]
    by_goodput = search_mod.search("llama3-70b", objective="goodput", tokens=2e12, goodput_options=scenario,
                                   **kw).plans[0]
    fastest = estimate_goodput(by_time.prediction, 2e12, **scenario)
    # the goodput objective never trains slower than the fastest step's plan; where it picks another
    # plan, that plan is slower per step and has more checkpoint writer nodes. (Since the overlap
    # slowdown of issue 16 the fastest plan already has pp=4, and it stays the goodput choice.)
    assert by_goodput.time_to_train_s <= fastest.expected_time_to_train_s * (1 + 1e-9)
    if by_goodput.prediction.graph.plan != by_time.prediction.graph.plan:
        assert by_goodput.prediction.step_time_s > by_time.prediction.step_time_s
        assert by_goodput.time_to_train_s < fastest.expected_time_to_train_s
        assert by_goodput.prediction.graph.plan.pp > by_time.prediction.graph.plan.pp   # more writer nodes
    # with fully parallel checkpoints (the default) the goodput objective keeps the fastest plan
    default = search_mod.search("llama3-70b", objective="goodput", tokens=2e12, **kw).plans[0]
    assert default.prediction.graph.plan == by_time.prediction.graph.plan


# ---- the command --------------------------------------------------------------------------------

def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_goodput_command_json(capsys):
    code, out, err = run(capsys, "goodput", "--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "1024",
                         "--plan", "tp=2,pp=1,zero=1", "--global-batch", "1024", "--seq-len", "8192",
                         "--tokens", "1T", "--mtbf", "4h", "--monte-carlo", "200", "--seed", "3", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["schema"] == 1
    assert set(d["lost_s"]) == {"checkpointing", "rework", "restart", "stragglers"}
    assert d["goodput"] == pytest.approx(d["ideal_time_to_train_s"] / d["expected_time_to_train_s"])
    assert d["mtbf_s"] == pytest.approx(4 * HOUR)
    assert d["monte_carlo"]["runs"] == 200
    assert abs(d["monte_carlo"]["mean_time_to_train_s"] / d["expected_time_to_train_s"] - 1) < 0.02


def test_goodput_command_table(capsys):
    code, out, err = run(capsys, "goodput", "--tokens", "100B", "--checkpoint-interval", "1h", "--hot-spares", "1",
                         "--failure-rate", "gpu=2e-5", "--checkpoint-mode", "async")
    assert code == 0, err
    assert "goodput" in out and "where the time beyond the ideal goes" in out


@pytest.mark.parametrize("args,field", [
    (["--tokens", "0"], "tokens"),
    (["--tokens", "-5T"], "tokens"),
    (["--tokens", "1e30"], "tokens"),
    (["--tokens", "many"], "tokens"),
    (["--tokens", "1T", "--mtbf", "0h"], "mtbf"),
    (["--tokens", "1T", "--mtbf", "-3h"], "mtbf"),
    (["--tokens", "1T", "--failure-rate", "gpu=0"], "failure_rates.gpu"),
    (["--tokens", "1T", "--failure-rate", "gpu=-1e-5"], "failure_rates.gpu"),
    (["--tokens", "1T", "--failure-rate", "warp_core=1e-5"], "failure_rates.warp_core"),
    (["--tokens", "1T", "--failure-model", "nope"], "failure_model"),
    (["--tokens", "1T", "--checkpoint-interval", "1s", "--storage-bandwidth", "1GB/s"], "checkpoint_interval"),
    (["--tokens", "1T", "--checkpoint-interval", "soon"], "checkpoint_interval"),
    (["--tokens", "1T", "--checkpoint-mode", "sometimes"], "checkpoint_mode"),
    (["--tokens", "1T", "--monte-carlo", "-1"], "monte_carlo"),
    (["--tokens", "1T", "--seed", "-1"], "seed"),
    (["--tokens", "1T", "--mtbf", "500ms"], "goodput"),
    ([], "tokens"),
])
def test_goodput_command_bad_input_is_one_line(capsys, args, field):
    code, out, err = run(capsys, "goodput", *args)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and field in lines[0], err


def test_docstring_examples_run():
    import doctest

    import clustertwin.reliability as rel
    from clustertwin.reliability import failures, goodput, stragglers
    for mod in (rel, failures, stragglers, goodput):
        assert doctest.testmod(mod).failed == 0
