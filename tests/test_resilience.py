"""Resilience (issue 20): fleets by component, recovery parts, policies, their Monte Carlo, the
comparison command, and the published figures of data/validation/resilience_published.csv."""
from __future__ import annotations

import csv
import json
import math
from functools import lru_cache
from pathlib import Path

import pytest

from clustertwin import predict
from clustertwin.cli import main
from clustertwin.errors import ClusterTwinError
from clustertwin.reliability import estimate_goodput
from clustertwin.reliability.fleets import FLEETS, load_fleet
from clustertwin.reliability.policies import COMPARED, POLICIES, compare_policies, parse_policy
from clustertwin.reliability.checkpoint import CheckpointConfig, checkpoint_costs
from clustertwin.reliability.recovery import init_time_s

ROOT = Path(__file__).resolve().parents[1]
HOUR = 3600.0
JOB = ["goodput", "--model", "llama3-8b", "--gpu", "h100", "--num-gpus", "1024", "--plan", "tp=2,pp=1,zero=1",
       "--global-batch", "1024", "--seq-len", "8192", "--tokens", "1T"]


@lru_cache(maxsize=None)
def small():
    return predict("llama3-8b", gpu="h100", num_gpus=1024, plan="tp=2,pp=1,zero=1", micro_batch=1,
                   global_batch=1024, seq_len=8192)


@lru_cache(maxsize=None)
def llama3_405b(num_gpus: int = 16384, dp: int = 128, global_batch: int = 2048):
    return predict("llama3.1-405b", cluster="meta-llama3-24k", num_gpus=num_gpus,
                   plan=f"tp=8,pp=16,vpp=4,dp={dp},cp=1,sp=1,zero=1", micro_batch=1, global_batch=global_batch,
                   seq_len=8192)


# ---- fleets ---------------------------------------------------------------------------------------

def test_fleets_split_table5_by_component_and_keep_its_total():
    f = load_fleet("llama3-16k")
    rates = f.job_rates_per_s(16384, 8, 8)
    assert {"gpu", "sdc", "hbm", "software", "nccl_timeout", "network", "nic", "host"} <= set(rates)
    assert sum(rates.values()) * 54 * 86400 == pytest.approx(419)
    assert rates["sdc"] * 54 * 86400 == pytest.approx(6)
    assert set(FLEETS) >= {"llama3-16k", "meta-rsc"}


@pytest.mark.parametrize("name", ["llama3-16k", "meta-rsc", "meta-rsc2"])
def test_mttf_falls_as_one_over_n(name):
    f = load_fleet(name)
    for n in (1024, 8192, 65536):
        assert f.job_mttf_s(2 * n) == pytest.approx(f.job_mttf_s(n) / 2)
        assert f.job_mttf_s(n) * n == pytest.approx(f.job_mttf_s(16384) * 16384)


def test_fleet_file_and_its_errors(tmp_path):
    f = load_fleet(ROOT / "data/fleets/example-fleet.yaml")
    assert f.name == "example-fleet" and f.init_scaling == "megascale"
    assert f.job_mttf_s(16384) == pytest.approx(load_fleet("llama3-16k").job_mttf_s(16384) / 1.5)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nfail_slow: {rate_per_node_hour: -1}\n")
    with pytest.raises(ClusterTwinError, match="fail_slow.rate_per_node_hour"):
        load_fleet(bad)
    bad.write_text("name: x\nwhatever: 1\n")
    with pytest.raises(ClusterTwinError, match="fleet.whatever"):
        load_fleet(bad)
    with pytest.raises(ClusterTwinError, match="unknown fleet"):
        load_fleet("nope")


# ---- recovery parts -------------------------------------------------------------------------------

def test_init_scaling_laws():
    assert init_time_s("stock-megatron", 30, 2048) == pytest.approx(1047)
    assert init_time_s("stock-megatron", 30, 4096) == pytest.approx(2 * 1047)
    assert init_time_s("megascale", 30, 10000) < 30
    assert init_time_s("fixed", 30, 10 ** 6) == 30


def test_json_reports_mttf_restart_time_and_its_parts():
    g = estimate_goodput(small(), 1e12, fleet="llama3-16k")
    d = g.to_json()
    assert d["job_mttf_s"] == pytest.approx(load_fleet("llama3-16k").job_mttf_s(1024))
    assert d["restart_time_s"] == pytest.approx(g.restart.mean_s)
    r = d["recovery"]
    in_place = r["detection_s"] + r["stop_s"] + r["init_s"] + r["load_s"] + r["warmup_s"]
    assert d["policy"]["recovery_branches_s"] == pytest.approx([in_place, in_place + r["spare_swap_s"],
                                                                 in_place + r["reschedule_s"]])
    assert set(d["lost_s"]) == {"checkpointing", "rework", "restart", "stragglers", "fail_slow"}
    assert sum(d["lost_s"].values()) == pytest.approx(d["expected_time_to_train_s"] - d["ideal_time_to_train_s"])
    stock = estimate_goodput(small(), 1e12, init_scaling="stock-megatron")
    assert stock.recovery.init_s == pytest.approx(1047 / 2)
    assert stock.expected_time_to_train_s > g.expected_time_to_train_s


# ---- policies -------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,msg", [("foo", "unknown policy"), ("restart+hot-spare", "baseline"),
                                      ("elastic-dp+replan", "cannot be combined"), ("hot-spare+hot-spare", "twice"),
                                      ("", "not a policy")])
def test_bad_policies(text, msg):
    with pytest.raises(ClusterTwinError, match=msg):
        parse_policy(text)


def test_combinations_are_canonical():
    assert parse_policy("hot-spare+in-memory-checkpoint") == ("in-memory-checkpoint", "hot-spare")
    for name in COMPARED:
        assert "+".join(parse_policy(name)) == name


def test_zero_failures_give_the_steady_state_for_every_policy():
    for pol in POLICIES:
        g = estimate_goodput(small(), 1e12, policy=pol, mtbf_s=1e15, planned_interruptions=False, stragglers=False)
        assert g.goodput > 0.9999, pol
        # what a policy holds when nothing fails still costs: spares are GPU-hours
        assert g.gpu_hours == pytest.approx((1024 + g.policy.spare_gpus) * g.expected_time_to_train_s / HOUR)


def test_more_spares_never_lower_goodput():
    base = dict(policy="hot-spare", mtbf_s=HOUR, repair_s=86400)
    times = [estimate_goodput(small(), 1e12, hot_spares=s, **base).expected_time_to_train_s for s in (0, 2, 8, 16, 64)]
    assert all(b <= a for a, b in zip(times, times[1:]))
    mc = [estimate_goodput(small(), 1e12, hot_spares=s, monte_carlo_runs=60, seed=3, **base).monte_carlo
          for s in (0, 2, 64)]
    assert mc[2].mean_s < mc[1].mean_s < mc[0].mean_s
    assert mc[2].spare_misses < mc[1].spare_misses      # the explicit pool: 2 spares are often all in repair


def test_policies_cut_what_they_say_they_cut():
    common = dict(mtbf_s=2 * HOUR)
    r = estimate_goodput(small(), 1e12, **common)
    mem = estimate_goodput(small(), 1e12, policy="in-memory-checkpoint", **common)
    assert mem.checkpoint.load_s < r.checkpoint.load_s or mem.lost_s["rework"] < r.lost_s["rework"]
    assert mem.policy.host_memory_bytes_per_node == pytest.approx(2 * mem.checkpoint.bytes_per_node_max)
    el = estimate_goodput(small(), 1e12, policy="elastic-dp", **common)
    assert el.policy.degraded_throughput == pytest.approx(508 / 512)    # tp=2: a node holds 4 of 512 replicas
    assert el.restart_time_s < r.restart_time_s and el.policy.spare_gpus == 0
    lm = estimate_goodput(small(), 1e12, policy="live-migration", **common)
    assert lm.policy.planned_cost_s == pytest.approx(20.0) and lm.policy.spare_gpus > 0
    # replan without a replanner prices the same plan on the surviving replicas; a replanner's worse plan
    # never makes it worse than that
    rp = estimate_goodput(small(), 1e12, policy="replan", replanner=lambda p, n: (10 * p.step_time_s, "slow"), **common)
    assert rp.policy.degraded_throughput == pytest.approx(508 / 512)


def test_elastic_dp_needs_replicas_to_drop():
    p = predict("llama3-8b", gpu="h100", num_gpus=8, plan="tp=8,pp=1", micro_batch=1, global_batch=8, seq_len=8192)
    with pytest.raises(ClusterTwinError, match="data-parallel replicas"):
        estimate_goodput(p, 1e9, policy="elastic-dp")
    res = compare_policies(p, 1e9, policies=["restart", "elastic-dp"], runs=5)
    assert res[-1].policy == "elastic-dp" and res[-1].estimate is None and not res[-1].to_json()["applies"]


@pytest.mark.parametrize("pol", ["restart", "in-memory-checkpoint+hot-spare", "elastic-dp", "live-migration"])
def test_monte_carlo_agrees_with_the_analytic_figure(pol):
    g = estimate_goodput(small(), 1e12, policy=pol, fleet="meta-rsc", mtbf_s=HOUR, hot_spares=4,
                         monte_carlo_runs=200, seed=7)
    mc = g.monte_carlo
    assert mc.mean_s == pytest.approx(g.expected_time_to_train_s, rel=0.02)
    assert mc.p10_s <= mc.p50_s <= mc.p90_s and mc.goodput_p10 <= mc.goodput_p50 <= mc.goodput_p90
    again = estimate_goodput(small(), 1e12, policy=pol, fleet="meta-rsc", mtbf_s=HOUR, hot_spares=4,
                             monte_carlo_runs=200, seed=7).monte_carlo
    assert again.mean_s == mc.mean_s        # deterministic with the seed


# ---- the command ----------------------------------------------------------------------------------

def test_compare_policies_command(capsys):
    assert main(JOB + ["--compare-policies", "--monte-carlo", "20", "--fleet", "llama3-16k", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schema"] == 1 and d["ranked_by"] == "time"
    names = [p["policy"] for p in d["policies"]]
    assert sorted(names) == sorted(COMPARED)
    times = [p["expected_time_to_train_s"] for p in d["policies"]]
    assert times == sorted(times)
    assert {"goodput_p10", "goodput_p50", "goodput_p90", "time_to_train_p50_s", "gpu_hours_p50"} <= set(d["policies"][0])
    assert main(JOB + ["--compare-policies", "--monte-carlo", "20", "--gpu-hour-price", "2"]) == 0
    out = capsys.readouterr().out
    assert "policies, best first" in out and "USD p50" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_policy_command_json(capsys):
    assert main(JOB + ["--policy", "in-memory-checkpoint+hot-spare", "--hot-spares", "3", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["policy"]["name"] == "in-memory-checkpoint+hot-spare" and d["policy"]["spares"] == 3
    assert d["checkpoint"]["mode"] == "in-memory" and d["recovery"]["load_from"] == "peer memory"
    assert {"job_mttf_s", "restart_time_s", "recovery", "gpu_hours", "cost_usd", "fleet"} <= set(d)


@pytest.mark.parametrize("args,field", [
    (["--policy", "nope"], "policy"), (["--policy", "restart+replan"], "policy"),
    (["--policy", "elastic-dp+replan"], "policy"), (["--fleet", "nope"], "fleet"),
    (["--fleet", "llama3-16k", "--failure-model", "llama3"], "fleet"), (["--hot-spares", "-1"], "hot_spares"),
    (["--compare-policies", "--policy", "hot-spare"], "policy"), (["--gpu-hour-price", "-2"], "gpu_hour_price"),
    (["--init-scaling", "quadratic"], "init_scaling"), (["--replace-time", "-5min"], "reschedule_s"),
])
def test_bad_input_is_one_line_exit_2(capsys, args, field):
    assert main(JOB + args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {field}") and "\n" not in err


# ---- the published figures ------------------------------------------------------------------------

def _model_value(row_id: str) -> float | None:
    if row_id == "llama3_mttf":
        return load_fleet("llama3-16k").job_mttf_s(16384) / HOUR
    if row_id == "llama3_ettr":
        return estimate_goodput(llama3_405b(), 15.6e12, fleet="llama3-16k").effective_training_time_ratio
    if row_id == "rsc1_mttf_16k":
        return load_fleet("meta-rsc").job_mttf_s(16384) / HOUR
    if row_id == "rsc1_mttf_131k":
        return load_fleet("meta-rsc").job_mttf_s(131072) / HOUR
    if row_id == "megascale_init_stock":
        return init_time_s("stock-megatron", 30, 2048)
    if row_id == "megascale_init_opt":
        return init_time_s("megascale", 30, 10000)
    if row_id == "restart_16k":
        return estimate_goodput(llama3_405b(), 15.6e12).restart_time_s
    if row_id in ("trainmover_waste", "trainmover_saving_week"):   # TrainMover's Fig. 9 projection at 64K GPUs
        waste = trainmover_paper_waste_per_week()
        best_other = min(waste[k] for k in TRAINMOVER_BASELINES)
        mover = waste["in-memory-checkpoint+live-migration"]
        return mover / best_other - 1.0 if row_id == "trainmover_waste" else best_other - mover
    if row_id == "resihp_throughput":
        p = llama2_70b_256()
        return (estimate_goodput(p, 1e11, policy="replan").policy.degraded_throughput
                / estimate_goodput(p, 1e11, policy="elastic-dp").policy.degraded_throughput)
    if row_id == "resihp_failslow":
        from clustertwin.reliability.policies import rebalanced_throughput
        return rebalanced_throughput(llama2_70b_256().graph.plan, 2.0) / (1 / 2.0)
    if row_id == "b200_gpu_failures":
        return load_fleet("lablup-b200-504").job_rates_per_s(504, 8, 8)["gpu"] * 55 * 86400
    if row_id in GEMINI_ROWS:
        return gemini_value(row_id)
    if row_id in ("oobleck_ettr_bert_10m", "oobleck_varuna_ettr_bert_10m", "oobleck_ettr_bert_10m_timeline",
                  "oobleck_varuna_ettr_bert_10m_timeline"):
        return oobleck_run("varuna" if "varuna" in row_id else "oobleck").effective_training_time_ratio
    if row_id == "byterobust_ettr":
        return estimate_goodput(llama3_405b(9600, 75, 1200), 9.4e12, fleet="llama3-16k",
                                policy="in-memory-checkpoint+hot-spare").effective_training_time_ratio
    return None


# TrainMover (Lao et al., OSDI'26, arXiv 2412.12636 v3) sec. 8.2, "Projected GPU-Hour Savings at Production Scale"
# (Fig. 9): GPU-hours wasted per week, extrapolated to 64K GPUs "using MTTF values from Meta [Kokolis et al.,
# HPCA'25] and a 1:8.9 expected-to-unexpected failure ratio [Llama 3: 47 planned, 419 unexpected]"; "we assume
# instant fault localization and isolation" (sec. 2.3); "a 2-minute infrastructure rescheduling cost to all
# systems" (Table 1, 8,192 GPUs); one standby machine for TrainMover. A restart's framework initialisation is
# Table 1's: 4.45 min at 8,192 GPUs, of which checkpoint loading 35.1% (priced here by the model's load), NCCL
# instantiation 24.5% and cold warm-up 40.4% (init_s below; no separate warm-up steps), held constant with scale as
# the paper holds each system's downtime. The systems it compares against: Megatron-LM's stop-reschedule-restart
# (restart) and Oobleck/Parcae's reconfiguration (-1 then +1: elastic-dp).
TRAINMOVER_BASELINES = ("restart", "elastic-dp")
TRAINMOVER_INIT_S = (0.245 + 0.404) * 4.45 * 60     # NCCL instantiation + cold warm-up of Table 1's 4.45 min
TRAINMOVER_RESCHEDULE_S = 120.0                     # "2-minute infrastructure rescheduling cost to all systems"


@lru_cache(maxsize=None)
def trainmover_paper_waste_per_week() -> dict[str, float]:
    """GPU-hours wasted per week of the run (failures, standby; stragglers left out) in TrainMover's projection
    setting: the Llama 3 405B shape on 65,536 GPUs, Kokolis et al.'s RSC-1 rate with planned events at 1/8.9 of it."""
    from clustertwin.reliability.failures import PRESETS
    rsc1 = PRESETS["kokolis-rsc1"]
    per_node_hour = 6.50e-3 / 24.0                     # RSC-1: 6.50 failures per 1000 node-days
    fm = rsc1.model_copy(update={"planned_per_node_hour": per_node_hour / 8.9, "name": "kokolis-rsc1+planned"})
    common = dict(failure_model=fm, detection_s=0.0, stop_s=TRAINMOVER_RESCHEDULE_S, reschedule_s=0.0,
                  spare_swap_s=0.0, init_s=TRAINMOVER_INIT_S, warmup_steps=0, stragglers=False)
    out = {}
    for pol in TRAINMOVER_BASELINES + ("in-memory-checkpoint", "in-memory-checkpoint+live-migration"):
        kw = dict(common)
        if "live-migration" in pol:
            # one standby (sec. 8.2: "simultaneous multi-machine failures are rare"); once promoted, the next one comes
            # from the backup pool after the rescheduling and its background warm-up (the framework initialisation)
            kw.update(hot_spares=1, repair_s=TRAINMOVER_RESCHEDULE_S + TRAINMOVER_INIT_S)
        g = estimate_goodput(llama3_405b(65536, 512, 8192), 15.6e12, policy=pol, **kw)
        waste = g.gpu_hours - g.num_gpus * (g.ideal_time_to_train_s + g.lost_s["stragglers"]) / HOUR
        out[pol] = waste / (g.expected_time_to_train_s / (7 * 86400))
    return out


# GEMINI (Wang et al., SOSP'23) sec. 6 and its artifact (github.com/zhuangwang93/Gemini_SOSP23,
# examples/SOSP_AE/AE_figures.ipynb, the code of its Fig. 14): a 100B model on 16 p4d.24xlarge (8 A100 40GB
# each, 400 Gb/s EFA), DeepSpeed ZeRO-3, FSx remote storage at 20 Gb/s aggregate, ~6 min to restart the
# training after a failure. The model's layer shape and the batch are not given there: GPT-3 175B's layer,
# 55 layers (100.3B parameters), and 512 x 1,024 tokens per step stand in.
GEMINI_ROWS = ("gemini_ckpt_remote_s", "gemini_waste_strawman_min", "gemini_waste_gemini_min", "gemini_recovery",
               "gemini_ettr_gemini_1", "gemini_ettr_strawman_1", "gemini_ettr_gemini_8", "gemini_ettr_strawman_8",
               "gemini_ettr_highfreq_1", "gemini_highfreq_stall_s")
GEMINI_SETTING = dict(storage_write_bandwidth_bytes_per_s="20Gbps", storage_read_bandwidth_bytes_per_s="20Gbps",
                      node_storage_bandwidth_bytes_per_s="20Gbps", detection_s=0.0, reschedule_s=0.0, init_s=360.0,
                      warmup_steps=0, stragglers=False, planned_interruptions=False)


@lru_cache(maxsize=None)
def gemini_100b():
    from clustertwin.catalog import load_model, load_node
    from clustertwin.specs.hardware import ClusterSpec
    model = load_model("gpt3-175b").model_copy(update={"name": "gemini-100b", "num_layers": 55})
    p4d = load_node("dgx-a100-40gb").model_copy(update={"name": "p4d.24xlarge", "nics_per_node": 4,
                                                         "nic_bandwidth_bytes_per_s": 100e9 / 8})
    cluster = ClusterSpec(name="p4d-16", node=p4d, num_nodes=16)
    return predict(model, cluster=cluster, num_gpus=128, plan="tp=1,pp=1,dp=128,zero=3,recompute=full",
                   micro_batch=1, global_batch=512, seq_len=1024, framework="deepspeed")


@lru_cache(maxsize=None)
def gemini_run(scheme: str, failures_per_day: float):
    """GEMINI's three schemes at ``failures_per_day``: Strawman (checkpoints to remote storage every 3 h,
    the BLOOM setup it cites), HighFreq (to remote storage as often as the storage allows) and GEMINI."""
    p = gemini_100b()
    opts = dict(GEMINI_SETTING, mtbf_s=86400.0 / failures_per_day)
    if scheme == "gemini":
        return estimate_goodput(p, 1e11, policy="in-memory-checkpoint", **opts)
    if scheme == "strawman":
        return estimate_goodput(p, 1e11, checkpoint_mode="async", checkpoint_interval_s=3 * HOUR, **opts)
    # HighFreq: each rank torch.save()s its shard (the stall), then it is sent to remote storage in the background
    save = estimate_goodput(p, 1e11, checkpoint_mode="async-serialized", **opts).checkpoint.save_s
    return estimate_goodput(p, 1e11, checkpoint_mode="async-serialized", checkpoint_interval_s=save, **opts)


def waste_per_failure_s(e) -> float:
    """Time a failure costs: its recovery plus the work redone (GEMINI's T_wasted, sec. 2.2)."""
    return (e.lost_s["restart"] + e.lost_s["rework"]) / e.expected_failures


def gemini_value(row_id: str) -> float:
    if row_id == "gemini_ckpt_remote_s":
        return gemini_run("strawman", 1).checkpoint.save_s
    if row_id == "gemini_highfreq_stall_s":            # torch.save() before sending: the stall per checkpoint
        return gemini_run("highfreq", 1).checkpoint.blocking_s
    if row_id == "gemini_recovery":
        return waste_per_failure_s(gemini_run("strawman", 1)) / waste_per_failure_s(gemini_run("gemini", 1))
    if row_id.startswith("gemini_waste_"):
        return waste_per_failure_s(gemini_run(row_id.split("_")[2], 1)) / 60.0
    _, _, scheme, f = row_id.split("_")
    return gemini_run(scheme, float(f)).effective_training_time_ratio


# Oobleck (Jang et al., SOSP'23): its figures come from a simulator in its artifact (github.com/SymbioticLab/Oobleck,
# branch sosp23-artifact, tools/simulator), whose README prints the time breakdown of BERT-large with a node lost
# every 10 minutes. Its inputs: 30 nodes, one lost every 600 s (traces/10m.csv); 8,192 samples a step at the
# throughput of the nodes left (varuna_simulator.py: 343.1 samples/s on 30 nodes ... 202.6 on 16); Oobleck
# reconfigures in 2 s (oobleck_simulator.py), detection by TCP disconnect; Varuna restarts in ~70 s (the README:
# 1,048.1 s of restarts over 15 failures) and checkpoints every 10 iterations, 15.8 s each.
OOBLECK_TPUT = (343.1328746, 331.6951121, 329.5800552, 326.5438348, 306.0386227, 298.3794267, 290.038974,
                280.0744467, 267.8972968, 255.720147, 243.5429971, 232.9541711, 222.3653452, 211.7765192,
                202.5688445)   # samples/s on 30, 29, ..., 16 nodes, one 10-minute span each


@lru_cache(maxsize=None)
def oobleck_prediction():
    return predict("gpt2-350m", gpu="a100", num_gpus=30, gpus_per_node=1, plan="tp=1,pp=1,dp=30,zero=0", micro_batch=1,
                   global_batch=8190, seq_len=512)


@lru_cache(maxsize=None)
def oobleck_run(system: str):
    """BERT-large's layer shape (GPT-2 medium: 24 layers of 1,024), 30 single-GPU nodes in data parallel, every
    replica holding the whole state; the step time the artifact's throughput table gives (mean over the trace)."""
    p = oobleck_prediction()
    step = sum(8192 / t for t in OOBLECK_TPUT) / len(OOBLECK_TPUT)
    opts = dict(step_time_s=step, mtbf_s=600.0, detection_s=0.0, reschedule_s=0.0, warmup_steps=0, stragglers=False,
                planned_interruptions=False)
    if system == "oobleck":
        return estimate_goodput(p, 8192 * 512 * 5000, policy="elastic-dp", init_s=2.0, **opts)
    ckpt = checkpoint_costs(p, CheckpointConfig()).bytes_total
    return estimate_goodput(p, 8192 * 512 * 5000, policy="restart", init_s=69.9, checkpoint_interval_s=10 * step,
                            storage_write_bandwidth_bytes_per_s=ckpt / 15.8, node_storage_bandwidth_bytes_per_s=1e15,
                            **opts)


@lru_cache(maxsize=None)
def llama2_70b_256():
    return predict("llama2-70b", gpu="h100", num_gpus=256, plan="tp=4,pp=4,dp=16", micro_batch=1, global_batch=1024,
                   seq_len=4096)


def published_rows() -> list[dict]:
    with open(ROOT / "data/validation/resilience_published.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_published_csv_has_sources():
    rows = published_rows()
    assert len(rows) >= 8
    for r in rows:
        assert r["source"] and r["source_detail"] and r["source_url"].startswith("https://"), r["id"]


@pytest.mark.parametrize("row", published_rows(), ids=lambda r: r["id"])
def test_published_figures_are_reproduced(row):
    got = _model_value(row["id"])
    if got is None:
        assert row["notes"].startswith(("not compared", "not reproduced (docs)"))     # recorded, with why
        return
    if row["notes"].startswith("not reproduced"):          # the size is off (docs/goodput.md says by how much
        assert (got > 0) == (float(row["published"]) > 0)  # and why); the direction must hold
        return
    if row["published"]:
        pub, tol = float(row["published"]), float(row["tolerance"])
        assert abs(got - pub) <= tol * abs(pub) + 1e-12, (got, pub)
    if row["published_low"]:
        assert got >= float(row["published_low"]), got
    if row["published_high"]:
        assert got <= float(row["published_high"]), got
    assert math.isfinite(got)


def test_search_goodput_objective_chooses_plan_and_policy_together():
    from clustertwin.search import search
    kw = dict(gpu="h100", num_gpus=64, global_batch=256, seq_len=8192, objective="goodput", tokens=1e11, top=2,
              shortlist=4, pareto_points=1)
    best = search("llama3-8b", goodput_options={"policy": "best", "mtbf_s": HOUR}, **kw)
    assert all(p.policy in COMPARED for p in best.plans)
    assert best.plans[0].to_json()["policy"] == best.plans[0].policy
    # the winner is the best policy of that plan
    pred = best.plans[0].prediction
    times = {p: estimate_goodput(pred, 1e11, policy=p, mtbf_s=HOUR).expected_time_to_train_s for p in COMPARED}
    assert times[best.plans[0].policy] == pytest.approx(min(times.values()))
    # the search table names the chosen policy (short names, as goodput --compare-policies)
    import io

    from rich.console import Console

    from clustertwin.report.console import print_all, search_tables
    con = Console(width=80, file=io.StringIO(), record=True)
    print_all(con, search_tables(best))
    text = con.export_text()
    assert "policy" in text and max(len(line) for line in text.splitlines()) <= 80
    short = best.plans[0].policy.replace("in-memory-checkpoint", "in-mem").replace("hot-spare", "spare")
    assert short.replace("elastic-dp", "elastic").replace("live-migration", "migrate").split("+")[0] in text


def test_docstring_examples_run():
    import doctest

    from clustertwin.reliability import fleets, policies, recovery
    for mod in (fleets, recovery, policies):
        assert doctest.testmod(mod).failed == 0


def test_degraded_running_is_played_out_in_the_monte_carlo():
    # replacements that take two hours: restart waits for each, elastic-dp runs on the survivors (several
    # nodes missing at once in the simulation; a time-equivalent in the analytic figure)
    common = dict(mtbf_s=HOUR, reschedule_s=2 * HOUR, monte_carlo_runs=100, seed=11)
    r = estimate_goodput(small(), 1e12, **common)
    el = estimate_goodput(small(), 1e12, policy="elastic-dp", **common)
    assert el.goodput > 1.5 * r.goodput
    assert el.monte_carlo.mean_s == pytest.approx(el.expected_time_to_train_s, rel=0.03)
    assert el.policy.degraded_s == pytest.approx(2 * HOUR - (el.policy.degraded_base_s - 300), rel=1e-9)


# ---- detection, re-grouping, the B200 fleet (fourth round) ---------------------------------------------------

def test_detection_depends_on_the_mechanism_not_the_policy():
    fast = estimate_goodput(small(), 1e12, detection="collective-tracing", mtbf_s=2 * HOUR)
    slow = estimate_goodput(small(), 1e12, detection="collective-timeout", mtbf_s=2 * HOUR)
    assert (fast.recovery.detection_s, slow.recovery.detection_s) == (15.0, 600.0)
    # the restart differs by exactly the detection difference in every branch
    assert slow.restart_time_s - fast.restart_time_s == pytest.approx(585.0)
    assert fast.expected_time_to_train_s < slow.expected_time_to_train_s
    # defaults: health checks for restart, collective tracing for live migration; detection_s wins over both
    assert estimate_goodput(small(), 1e12).recovery.detection == "health-check"
    assert estimate_goodput(small(), 1e12, policy="live-migration").recovery.detection_s == 15.0
    given = estimate_goodput(small(), 1e12, detection="collective-tracing", detection_s=42)
    assert (given.recovery.detection_s, given.recovery.detection) == (42.0, "given")
    with pytest.raises(ClusterTwinError, match="detection"):
        estimate_goodput(small(), 1e12, detection="telepathy")


def test_replan_regroups_survivors_into_whole_replicas():
    from clustertwin.parallel import ParallelDims
    from clustertwin.reliability.policies import rebalanced_throughput, regrouped_throughput
    # TP4 PP4: a node holds two TP groups of two replicas; their 24 surviving GPUs make one more replica
    assert regrouped_throughput(ParallelDims(tp=4, pp=4, dp=16), 8) == pytest.approx(15 / 16)
    # TP8: a node is one TP group; the other 120 GPUs of its 128-GPU replica cannot make a whole one
    assert regrouped_throughput(ParallelDims(tp=8, pp=16, dp=128), 8) == pytest.approx(127 / 128)
    # fail-slow: rebalancing is never worse than waiting for the slow GPU, and equal at no slowdown
    d = ParallelDims(tp=4, pp=4, dp=16)
    assert rebalanced_throughput(d, 1.0) == 1.0
    assert all(rebalanced_throughput(d, s) > 1 / s for s in (1.5, 2, 5))
    with pytest.raises(ClusterTwinError, match="slowdown"):
        rebalanced_throughput(d, 0.5)


def test_b200_fleet_reproduces_its_report():
    f = load_fleet("lablup-b200-504")
    rates = f.job_rates_per_s(504, 8, 8)
    assert rates["gpu"] * 55 * 86400 == pytest.approx(10)
    assert rates["hbm"] == 0 and f.job_mttf_s(1008) == pytest.approx(f.job_mttf_s(504) / 2)


@pytest.mark.parametrize("args", [["--detection", "telepathy"], ["--detection", "-5s"]])
def test_bad_detection_is_one_line_exit_2(capsys, args):
    assert main(JOB + args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: detection") and "\n" not in err


def test_replan_rebalances_fail_slow_nodes_instead_of_draining_them():
    common = dict(fleet="llama3-16k", mtbf_s=2 * HOUR)
    el = estimate_goodput(small(), 1e12, policy="elastic-dp", **common)
    rp = estimate_goodput(small(), 1e12, policy="replan", **common)
    # a 10% slow node in one of 512 replicas, kept for a day's repair, costs less than a checkpoint + restart
    f = load_fleet("llama3-16k").fail_slow
    lost = (1 - (511 + 1 / (1 + f.slowdown)) / 512) * 86400
    assert rp.policy.slow_cost_s == pytest.approx(f.detect_s * f.slowdown / (1 + f.slowdown) + 60 + lost)
    assert rp.policy.slow_cost_s < el.policy.slow_cost_s


def test_elastic_dp_with_full_replicas_loses_only_the_step_in_flight():
    """Oobleck's recovery: the surviving replicas hold the whole state, so a failure costs the reconfiguration
    and the step in flight, never a rollback to a checkpoint, and no periodic checkpoint is priced."""
    e = oobleck_run("oobleck")
    assert e.policy.state_in_replicas and e.checkpoint_interval_steps == 1
    assert e.to_json()["checkpoint_interval_source"] == "replicas"
    assert e.lost_s["checkpointing"] == 0
    step = e.step_time_s
    assert e.lost_s["rework"] / e.expected_failures < step               # at most the step in flight
    assert all(b == pytest.approx(4.0, abs=0.1) for b in e.policy.branches_s)  # 2-s reconfiguration + 2-s rejoin
    mc = estimate_goodput(oobleck_prediction(), 8192 * 512 * 5000, policy="elastic-dp", init_s=2.0, step_time_s=step, mtbf_s=600.0,
                          detection_s=0.0, reschedule_s=0.0, warmup_steps=0, stragglers=False,
                          planned_interruptions=False, monte_carlo_runs=100, seed=3)
    assert mc.monte_carlo.mean_s == pytest.approx(e.expected_time_to_train_s, rel=0.02)
    # a sharded optimizer (ZeRO-1) lost its shard: back to checkpoints and their rollback
    z = estimate_goodput(small(), 1e11, policy="elastic-dp")
    assert not z.policy.state_in_replicas and z.to_json()["checkpoint_interval_source"] != "replicas"


def test_measured_step_time_is_priced_as_given():
    e = estimate_goodput(small(), 1e11, step_time_s=10.0, stragglers=False)
    assert e.step_time_s == 10.0 and e.ideal_time_to_train_s == pytest.approx(e.steps * 10.0)
