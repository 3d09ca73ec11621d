"""Search: the space and its pruning agree with check_plan, the batch evaluation agrees with predict,
the best plan is the best, objectives, Pareto view, bottleneck text, CLI and its one-line errors."""
from __future__ import annotations

import itertools
import json
import random
import sys

import pytest

from clustertwin.catalog import cluster_for_gpu, load_model
from clustertwin.cli import main
from clustertwin.errors import ClusterTwinError, PlanError
from clustertwin.predict import make_training_job, predict_job
from clustertwin.search import bottleneck, make_space, search
from clustertwin.schedule.batch import BatchPricer
from clustertwin.specs import ModelSpec, make_job, make_plan

# a small model whose space is small enough to check plan by plan
TINY = ModelSpec(name="tiny", num_layers=4, hidden_size=256, num_heads=8, num_kv_heads=4, ffn_hidden_size=1024,
                 vocab_size=1000, max_seq_len=512, activation="swiglu", norm="rmsnorm", positions="rope", bias=False)

# check_plan's message for each prune reason (field of the PlanError)
REASON_FIELD = {"tp_heads": "plan.tp", "tp_kv_heads": "plan.tp", "tp_ffn": "plan.tp", "tp_nodes": "plan.tp",
                "vpp_without_pp": "plan.vpp", "layer_split": "plan.pp", "cp_seq_len": "plan.cp",
                "ep_dp_cp": "plan.ep", "etp_expert_width": "plan.etp", "batch": "plan.global_batch",
                "interleave_microbatches": "plan.global_batch", "tp_overlap_nodes": "plan.overlap_tp_comm"}


def _space(model, gpus, gb, seq, **kw):
    return make_space(load_model(model) if isinstance(model, str) else model, cluster_for_gpu("h100-sxm", gpus)
                      if not isinstance(gpus, tuple) else cluster_for_gpu(gpus[0], gpus[1]), gb, seq, **kw)


# ---- the space ------------------------------------------------------------------------------------
def test_structural_pruning_matches_check_plan() -> None:
    """Every raw candidate structure: the space keeps it iff make_job accepts it, and prunes it for
    the reason check_plan names."""
    sp = _space(TINY, 16, 16, 512)
    valid, _, _ = sp.structures()
    kept = {(s.tp, s.pp, s.vpp, s.cp, s.dp, s.ep, s.micro_batch) for s in valid}
    seen = 0
    for (tp, pp, cp, dp), vpp, mb in itertools.product(sp.factorizations(), sp.vpp_domain, sp.mb_domain):
        plan = make_plan(tp=tp, pp=pp, vpp=vpp, cp=cp, dp=dp, micro_batch=mb, global_batch=16)
        try:
            make_job(TINY, sp.cluster, plan, 512)
            ok, field = True, None
        except PlanError as e:
            ok, field = False, e.field
        key = (tp, pp, vpp, cp, dp, 1, mb)
        assert (key in kept) == ok, (key, field)
        if not ok:
            reason = (sp.tp_reason(tp) or sp.layout_reason(pp, vpp) or ("cp_seq_len" if 512 % cp else None)
                      or sp.batch_reason(dp, mb, pp, vpp))
            assert REASON_FIELD[reason] == field
        seen += 1
    assert seen > 300 and len(kept) > 20


def test_counts_add_up_and_options_are_not_double_counted() -> None:
    r = search(TINY, gpu="h100-sxm", num_gpus=16, global_batch=16, seq_len=512, top=3, pareto_points=1)
    assert r.evaluated == r.feasible + sum(r.pruned.values())
    assert set(r.pruned) <= {"tp_heads", "tp_kv_heads", "tp_ffn", "tp_nodes", "vpp_without_pp", "layer_split",
                             "cp_seq_len", "batch", "interleave_microbatches", "memory"}
    sp = _space(TINY, 16, 16, 512)
    # tp=1: no sp, no TP overlap; pp=1: no p2p overlap; dp*cp=1: ZeRO 0 or 3 and no DP overlaps
    assert sp.option_count(1, 1, 1) == 1 * 3 * 1 * 1 * 2
    # tp=2: TP overlap only with sp (Megatron's tp_overlap_sp): (sp off, no overlap) + (sp on, either)
    assert sp.option_count(2, 2, 4) == 3 * (1 + 2) * 2 * (2 + 2 * 2 + 2 * 2 + 2 * 1)
    for p in r.plans:
        plan = p.prediction.job.plan
        assert not (plan.overlap_tp_comm and plan.tp > 1 and not plan.sp)


def test_fixed_fields_restrict_the_space() -> None:
    r = search(TINY, gpu="h100-sxm", num_gpus=16, global_batch=16, seq_len=512, top=5, pareto_points=1,
               fix="tp=2,recompute=full,sp=1")
    for p in r.plans:
        plan = p.prediction.graph.plan
        assert (plan.tp, plan.recompute, plan.sp) == (2, "full", True)
    full = search(TINY, gpu="h100-sxm", num_gpus=16, global_batch=16, seq_len=512, top=1, pareto_points=1)
    assert r.evaluated < full.evaluated
    with pytest.raises(PlanError, match="fix"):
        search(TINY, gpu="h100-sxm", num_gpus=16, global_batch=16, seq_len=512, fix="tp=3")
    with pytest.raises(PlanError, match="global batch"):
        search(TINY, gpu="h100-sxm", num_gpus=16, global_batch=16, seq_len=512, fix="gbs=32")


# ---- the batch evaluation is predict ---------------------------------------------------------------
def _all_feasible(space):
    structures, _, _ = space.structures()
    return BatchPricer(space).run(structures, 10**7)


def test_every_feasible_plan_and_only_those() -> None:
    """On a space small enough to predict plan by plan: the evaluation keeps exactly the plans
    predict says fit under the memory limit, with predict's step time and memory."""
    fix = "overlap_dp_comm=1,overlap_pp_comm=1,overlap_tp_comm=0"
    mems = sorted(c.memory_bytes for c in _all_feasible(_space(TINY, 8, 8, 512, fix=fix)).candidates)
    hbm = cluster_for_gpu("h100-sxm", 8).gpu.hbm_bytes
    sp = _space(TINY, 8, 8, 512, fix=fix, max_memory_fraction=mems[len(mems) // 2] / hbm)  # half the plans fit
    ev = _all_feasible(sp)
    got = {c.plan(sp).model_dump_json(): (c.step_time_s, c.memory_bytes) for c in ev.candidates}
    assert ev.feasible == len(got) and ev.memory_pruned > 0
    structures, _, _ = sp.structures()
    expected = {}
    for s in structures:
        for spf, rc, z, opg in itertools.product(sp.sp_domain(s.tp), sp.recompute_domain, sp.zero_domain(s.dp * s.cp),
                                                 (False, True)):
            if opg not in sp.overlap_param_gather_domain(s.dp * s.cp, z):
                continue
            plan = make_plan(tp=s.tp, pp=s.pp, vpp=s.vpp, cp=s.cp, dp=s.dp, ep=s.ep, micro_batch=s.micro_batch,
                             global_batch=8, sp=spf, recompute=rc, zero_stage=z, overlap_param_gather=opg,
                             overlap_dp_comm=True, overlap_pp_comm=True, overlap_tp_comm=False)
            pred = predict_job(make_job(TINY, sp.cluster, plan, 512))
            if pred.memory.total_bytes <= sp.memory_limit_bytes:
                expected[plan.model_dump_json()] = (pred.step_time_s, pred.memory.total_bytes)
    assert set(got) == set(expected)
    for k, (t, mem) in expected.items():
        assert got[k][0] == pytest.approx(t, rel=1e-12) and got[k][1] == pytest.approx(mem, rel=1e-12)


@pytest.mark.parametrize("model,gpu,n,gb,seq,kw", [
    ("gpt3-1.3b", "a100-80gb", 32, 64, 2048, {"fix": "attention_kernel=unfused"}),   # dropout, unfused attention
    ("llama3-8b", "h100-sxm", 16, 32, 8192, {}),                                    # GQA, cp
    ("mixtral-8x7b", "h100-sxm", 16, 32, 4096, {}),                                 # MoE: ep, edp
    ("mixtral-8x7b", "h100-sxm", 32, 32, 4096, {"fix": "dispatcher=deepep"}),       # EP across nodes, dedup
    ("llama3-8b", "h100-sxm", 16, 32, 4096, {"fix": "grad_reduce_dtype=bf16"}),    # bf16 gradient buffers
    ("qwen1.5-moe-a2.7b", "h100-sxm", 16, 64, 4096, {"precision": "fp8"}),          # shared experts, fp8
    ("llama3-8b", "a100-80gb", 16, 32, 4096, {"framework": "torchtitan"}),          # autocast weights
])
def test_batch_evaluation_equals_predict(model, gpu, n, gb, seq, kw) -> None:
    sp = _space(model, (gpu, n), gb, seq, **kw)
    ev = _all_feasible(sp)
    assert ev.feasible > 100
    rng = random.Random(5)
    for c in ev.candidates[:3] + rng.sample(ev.candidates, 40):
        pred = predict_job(make_job(sp.model, sp.cluster, c.plan(sp), seq, sp.framework))
        assert c.step_time_s == pytest.approx(pred.step_time_s, rel=1e-12)
        assert c.memory_bytes == pytest.approx(pred.memory.total_bytes, rel=1e-12)


def test_memory_first_and_shape_classes_shared() -> None:
    sp = _space("gpt3-175b", ("a100-80gb", 256), 512, 2048)
    structures, _, _ = sp.structures()
    ev = BatchPricer(sp).run(structures, 5)
    # far fewer shape classes priced than plans timed: layers are priced per shape class
    assert ev.shape_classes * 20 < ev.feasible
    assert ev.memory_pruned > 0


# ---- the best plan -----------------------------------------------------------------------------------
def test_best_plan_beats_hand_written_plans_and_reports_predict_numbers() -> None:
    r = search("gpt3-1.3b", gpu="a100-80gb", num_gpus=16, global_batch=64, seq_len=2048, top=5, pareto_points=1)
    best = r.plans[0].prediction
    times = [p.prediction.step_time_s for p in r.plans]
    assert times == sorted(times)
    for plan in ("tp=1,pp=1,zero=1", "tp=2,pp=1,sp=1,zero=1", "tp=1,pp=2,zero=1", "tp=4,pp=1,sp=1,recompute=full"):
        job = make_training_job("gpt3-1.3b", gpu="a100-80gb", num_gpus=16, plan=plan, micro_batch=1,
                                global_batch=64, seq_len=2048)
        pred = predict_job(job)
        assert not pred.fits or best.step_time_s <= pred.step_time_s
    again = predict_job(best.job)
    assert again.step_time_s == best.step_time_s and again.fits


def test_published_runs_are_matched_or_beaten() -> None:
    """Two published runs (validation CSV): the best plan found is at least as fast under the model."""
    from pathlib import Path

    from clustertwin.validate import job_from_row, read_runs
    csv = Path(__file__).resolve().parents[1] / "data" / "validation" / "public_runs.csv"
    rows = {r.run_id: r for r in read_runs(csv)}
    for run in ("korthikanti-gpt-22b-selective-sp", "dgxc-h100-llama3.1-8b-bf16-8gpu"):
        job = job_from_row(rows[run])
        pub = predict_job(job)
        fixed = {"attention_kernel": job.plan.attention_kernel} if job.plan.attention_kernel else {}
        r = search(job.model, cluster=job.cluster, global_batch=job.plan.global_batch, seq_len=job.seq_len,
                   precision=job.plan.precision, framework=job.framework, fix=fixed or None, top=1, pareto_points=1)
        assert r.plans[0].prediction.step_time_s <= pub.step_time_s


# ---- objectives and the Pareto view --------------------------------------------------------------------
def test_pareto_view_over_gpu_counts() -> None:
    r = search("gpt3-1.3b", gpu="a100-80gb", num_gpus=64, global_batch=64, seq_len=2048, top=2, pareto_points=3)
    assert [q.num_gpus for q in r.pareto] == [64, 32, 16]
    assert r.pareto[0].plan.prediction.step_time_s == r.plans[0].prediction.step_time_s
    for q in r.pareto:
        others = [o for o in r.pareto if o is not q]
        dominated = any(o.plan.prediction.step_time_s <= q.plan.prediction.step_time_s
                        and o.gpu_hours_per_step <= q.gpu_hours_per_step for o in others)
        assert q.on_front == (not dominated)
    assert any(q.on_front for q in r.pareto)


def test_cost_objective_ranks_by_cost_across_gpu_counts() -> None:
    r = search("gpt3-1.3b", gpu="a100-80gb", num_gpus=64, global_batch=64, seq_len=2048, top=6, pareto_points=3,
               objective="cost", gpu_hour_price=2.0)
    costs = [p.cost_usd for p in r.plans]
    assert costs == sorted(costs)
    for p in r.plans:   # per step: step time x GPUs x price
        assert p.cost_usd == pytest.approx(p.prediction.step_time_s / 3600 * p.num_gpus * 2.0)
    assert min(p.num_gpus for p in r.plans) < 64 or len({p.num_gpus for p in r.plans}) == 1
    assert r.plans[0].cost_usd <= min(q.gpu_hours_per_step * 2.0 for q in r.pareto) * (1 + 1e-9)


def test_goodput_objective_uses_reliability() -> None:
    pytest.importorskip("clustertwin.reliability")
    r = search("gpt3-1.3b", gpu="a100-80gb", num_gpus=32, global_batch=64, seq_len=2048, top=4, pareto_points=1,
               objective="goodput", tokens=1e11)
    ttt = [p.time_to_train_s for p in r.plans]
    assert ttt == sorted(ttt)
    for p in r.plans:
        assert 0 < p.goodput <= 1 and p.time_to_train_s >= p.prediction.step_time_s


def test_goodput_without_the_reliability_module_is_a_one_line_error(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "clustertwin.reliability", None)   # import fails
    code = main(["search", "-m", "gpt3-125m", "--gpu", "a100-80gb", "-n", "8", "--global-batch", "8",
                 "--objective", "goodput", "--tokens", "1T"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: objective:") and err.count("\n") == 1


# ---- bottleneck text -------------------------------------------------------------------------------
@pytest.mark.parametrize("plan,mb,gb,words", [
    ("tp=2,pp=8,dp=1,sp=1,zero=1", 1, 8, "pipeline bubble"),       # 8 stages, 8 micro-batches
    ("tp=16,pp=1,dp=1,sp=1,zero=1,overlap_tp_comm=0", 1, 8, "TP communication"),  # TP across two nodes
    ("tp=1,pp=1,dp=16,zero=1,recompute=full", 8, 128, "recomputation"),
])
def test_bottleneck_names_what_dominates(plan, mb, gb, words) -> None:
    job = make_training_job("gpt3-1.3b", gpu="a100-80gb", num_gpus=16, plan=plan, micro_batch=mb, global_batch=gb,
                            seq_len=2048)
    text = bottleneck(predict_job(job))
    assert text.startswith(words) and "relieve" in text


# ---- CLI -------------------------------------------------------------------------------------------
def test_cli_json(capsys) -> None:
    code = main(["search", "-m", "gpt3-125m", "--gpu", "a100-80gb", "-n", "16", "--global-batch", "32",
                 "--seq-len", "1024", "--top", "3", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["schema"] == 1
    assert out["evaluated"] == out["feasible"] + sum(out["pruned"].values())
    assert len(out["plans"]) == 3 and [q["num_gpus"] for q in out["pareto"]] == [16, 8]
    p = out["plans"][0]
    assert {"plan", "step_time_s", "mfu", "memory_per_gpu_bytes", "bottleneck"} <= set(p)
    assert p["memory_per_gpu_bytes"]["total"] == pytest.approx(sum(v for k, v in p["memory_per_gpu_bytes"].items()
                                                                   if k != "total"))
    assert p["plan"]["global_batch"] == 32 and out["elapsed_s"] > 0


def test_cli_table(capsys) -> None:
    code = main(["search", "-m", "gpt3-125m", "--gpu", "a100-80gb", "-n", "16", "--global-batch", "16",
                 "--top", "2", "--gpu-hour-price", "2", "--objective", "cost"])
    out = capsys.readouterr().out
    assert code == 0 and "evaluated" in out and "Pareto" in out and "bottleneck" in out


@pytest.mark.parametrize("args,field", [
    (["--objective", "speed"], "objective"),
    (["--objective", "cost"], "gpu_hour_price"),
    (["--objective", "goodput"], "tokens"),
    (["--tokens", "lots", "--objective", "goodput"], "tokens"),
    (["--fix", "tp=3"], "fix"),
    (["--fix", "banana=2"], "plan.banana"),
    (["--max-memory-fraction", "0"], "max_memory_fraction"),
    (["--max-memory-fraction", "1.5"], "max_memory_fraction"),
    (["--top", "0"], "top"),
    (["--pareto-points", "0"], "pareto_points"),
    (["--global-batch", "0"], "plan.global_batch"),    # as predict says it
    (["--seq-len", "-5"], "seq_len"),
    (["--gpu", "h900"], "gpu"),
])
def test_cli_bad_input_is_one_line(args, field, capsys) -> None:
    base = ["search", "-m", "gpt3-125m", "--gpu", "a100-80gb", "-n", "8", "--global-batch", "8"]
    # later options override earlier ones
    code = main(base + args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"error: {field}") and err.count("\n") == 1 and "Traceback" not in err


def test_nothing_fits_is_a_plan_error() -> None:
    with pytest.raises(ClusterTwinError, match="no plan"):
        search("megatron-1t", gpu="a100-40gb", num_gpus=8, global_batch=8, seq_len=2048, pareto_points=1)


def test_nothing_divides_is_a_plan_error_naming_the_reasons() -> None:
    # 24 GPUs = 3 nodes: the factor 3 fits no size of a 2-layer model at a global batch of 16
    two = TINY.model_copy(update={"name": "two-layers", "num_layers": 2})
    with pytest.raises(PlanError, match="no plan of two-layers divides"):
        search(two, gpu="h100-sxm", num_gpus=24, global_batch=16, seq_len=512, pareto_points=1)


def test_torchtitan_fsdp_under_pp_searches_the_gradient_overlap() -> None:
    """torchtitan reduces FSDP gradients once per step under PP: overlap_dp_comm matters there."""
    r = search("llama3-8b", gpu="h100-sxm", num_gpus=32, global_batch=32, seq_len=8192, framework="torchtitan",
               fix="tp=1,pp=4,vpp=1,zero=3,mb=1,rc=none", pareto_points=1, top=1)
    best = r.plans[0].prediction
    assert best.graph.plan.overlap_dp_comm is True
    off = predict_job(make_job(best.job.model, best.job.cluster,
                               best.job.plan.model_copy(update={"overlap_dp_comm": False}), 8192, "torchtitan"))
    assert best.step_time_s < off.step_time_s


def test_tp_overlap_only_within_an_nvlink_domain() -> None:
    """Transformer Engine's userbuffers overlap TP traffic over NVLink only: a TP group spanning
    nodes runs without it, and holding it on prunes such groups for the reason check_plan names."""
    sp = _space("llama3-8b", 32, 32, 4096, fix="overlap_tp_comm=1")
    assert sp.tp_reason(16) == "tp_overlap_nodes" and sp.tp_reason(8) is None
    plan = make_plan(tp=16, dp=2, micro_batch=1, global_batch=32, overlap_tp_comm=True)
    with pytest.raises(PlanError) as err:
        make_job(sp.model, sp.cluster, plan, 4096)
    assert err.value.field == REASON_FIELD["tp_overlap_nodes"]
    free = _space("llama3-8b", 32, 32, 4096)
    assert free.overlap_tp_domain(16) == (False,) and free.overlap_tp_domain(8) == (False, True)
    p16 = predict_job(make_job(free.model, free.cluster, make_plan(tp=16, dp=2, micro_batch=1, global_batch=32,
                                                                   sp=True), 4096))
    assert p16.graph.plan.overlap_tp_comm is False            # the framework default does not apply
