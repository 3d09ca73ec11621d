"""parallel/: the layout's sizes and groups, and the one table of plan rules, read alike by
check_plan (one plan), the search's pruning (counts per reason) and on numpy arrays of plans;
framework capabilities are rules of the same table."""
from __future__ import annotations

import itertools
import random
from pathlib import Path

import numpy as np
import pytest

from clustertwin.catalog import cluster_for_gpu, load_model
from clustertwin.cli import main
from clustertwin.errors import PlanError
from clustertwin.parallel import (RULE_NAMES, RULES, STAGES, Capabilities, JobFacts, ParallelDims, PlanFacts,
                                  RuleBroken, expert_dp, first_broken, first_broken_index, group_placements,
                                  place_group, rule, rules_markdown)
from clustertwin.search import PRUNE_REASONS, make_space, search
from clustertwin.specs import ModelSpec, ResolvedPlan, check_plan, make_job, make_plan
from clustertwin.specs.framework import FRAMEWORK_PROFILES, capabilities_markdown, get_framework

DOCS = Path(__file__).resolve().parents[1] / "docs" / "model.md"

# 32 heads, 8 KV heads, MLP 14336, 32 layers on nodes of 8 GPUs, 64 GPUs, 8192 tokens; 8 experts of width 1024
J = JobFacts(num_layers=32, heads=32, kv_heads=8, ffn=14336, gpus_per_node=8, num_gpus=64, seq_len=8192,
             experts=8, expert_ffn=1024)
DENSE = JobFacts(num_layers=32, heads=32, kv_heads=8, ffn=14336, gpus_per_node=8, num_gpus=64, seq_len=8192)


def _fw(can: Capabilities, base: JobFacts = J) -> JobFacts:
    return JobFacts(**{**base.__dict__, "framework": "fw", "can": can})


# ---- the layout ------------------------------------------------------------------------------------
def test_sizes_on_ints_and_arrays() -> None:
    d = ParallelDims(tp=8, pp=4, cp=2, dp=4, ep=8)
    assert (d.world_size, d.dp_cp, d.model_parallel, d.expert_tp, d.expert_dp) == (256, 8, 64, 8, 1)
    assert ParallelDims(tp=8, cp=2, dp=4, ep=8, etp=1).expert_dp == 8      # 64 ranks over 8 x 1
    arr = ParallelDims(tp=np.array([8, 8, 2]), cp=np.array([2, 2, 1]), dp=np.array([4, 4, 4]), ep=np.array([8, 8, 1]),
                       etp=np.array([8, 1, 2]))
    assert list(arr.expert_dp) == [1, 8, 4]
    plan = make_job(load_model("mixtral-8x7b"), cluster_for_gpu("h100-sxm", 32), make_plan(tp=2, ep=8), 4096).plan
    assert isinstance(plan, ResolvedPlan) and isinstance(plan.dp, int) and expert_dp(plan) == 16 * 2 // (8 * 2)


def test_group_placement_in_megatron_rank_order() -> None:
    g = group_placements(make_plan(tp=4, cp=2, dp=8, pp=2, ep=4, etp=1), 8)
    assert g["tp"] == place_group(4, 1, 8) and g["tp"].nodes == 1
    assert g["cp"].size == 2 and g["cp"].nodes == 1            # tp x cp = 8 ranks: one node
    assert g["dp_cp"].size == 16 and g["dp_cp"].ranks_per_node == 2 and g["dp_cp"].nodes == 8
    assert g["ep"] == place_group(4, 1, 8)                       # etp = 1: ep innermost
    assert g["edp"].size == 4 * 2 * 8 // 4 and g["pp"] == place_group(2, 64, 8)
    with pytest.raises(PlanError, match="plan.dp"):
        group_placements(make_plan(tp=2), 8)                     # dp not resolved yet


# ---- each rule: a hand-checked int case, and the same answers on arrays ------------------------------
ZERO_CAN = Capabilities(zero_stages=(0, 2, 3), sharded_grads_with_pp=False, ddp_with_model_parallel=False)
STRUCT_CAN = Capabilities(interleaved_pp=False, context_parallel=False, expert_parallel=False, expert_tp_any=False,
                          tp_overlap=False)
# rule -> (job facts, [(plan, broken?)]): each plan written out by hand
A100 = JobFacts(**{**J.__dict__, "gpu": "a100-80gb", "precisions": ("fp32", "tf32", "bf16", "fp16")})
CASES: dict[str, tuple[JobFacts, list[tuple[PlanFacts, bool]]]] = {
    "precision_gpu": (A100, [(PlanFacts(1, precision="fp8"), True), (PlanFacts(1, precision="bf16"), False),
                             (PlanFacts(1, precision="fp32"), False), (PlanFacts(1), False)]),
    "gpus": (J, [(PlanFacts(8, pp=2, dp=4), False), (PlanFacts(8, pp=2, dp=2), True), (PlanFacts(4, cp=2, dp=8), False)]),
    "tp_heads": (J, [(PlanFacts(8), False), (PlanFacts(3), True), (PlanFacts(64), True)]),
    "tp_kv_heads": (J, [(PlanFacts(4), False), (PlanFacts(16), False), (PlanFacts(12), True)]),
    "tp_ffn": (J, [(PlanFacts(8), False), (PlanFacts(5), True), (PlanFacts(2048), False)]),
    "tp_nodes": (J, [(PlanFacts(8), False), (PlanFacts(16), False), (PlanFacts(3), True), (PlanFacts(12), True)]),
    "tp_overlap_nodes": (J, [(PlanFacts(8, overlap_tp=True), False), (PlanFacts(16, overlap_tp=True), True),
                             (PlanFacts(16), False)]),
    "tp_overlap_sp": (J, [(PlanFacts(8, overlap_tp=True, sp=True), False), (PlanFacts(8, overlap_tp=True), True),
                          (PlanFacts(1, overlap_tp=True), False), (PlanFacts(8, sp=False), False)]),
    "vpp_without_pp": (J, [(PlanFacts(1, vpp=2), True), (PlanFacts(1, pp=2, vpp=2), False), (PlanFacts(1), False)]),
    "dualpipe_layout": (J, [(PlanFacts(1, pp=4, dualpipe=True), False), (PlanFacts(1, pp=3, dualpipe=True), True),
                            (PlanFacts(1, pp=4, vpp=2, dualpipe=True), True), (PlanFacts(1, dualpipe=True), False),
                            (PlanFacts(1, pp=3), False)]),
    "layer_split": (J, [(PlanFacts(1, pp=8, vpp=4), False), (PlanFacts(1, pp=8, vpp=8), True),
                        (PlanFacts(1, pp=33), True)]),
    "cp_seq_len": (J, [(PlanFacts(1, cp=2), False), (PlanFacts(1, cp=3), True)]),
    "ep_dense": (DENSE, [(PlanFacts(1, ep=2), True), (PlanFacts(1), False)]),
    "ep_overlap_dense": (DENSE, [(PlanFacts(1, overlap_ep=True), True), (PlanFacts(1), False)]),
    "ep_experts": (J, [(PlanFacts(1, ep=8), False), (PlanFacts(1, ep=3), True), (PlanFacts(1, ep=16), True)]),
    "etp_expert_width": (J, [(PlanFacts(8, ep=2), False), (PlanFacts(3, ep=2), True), (PlanFacts(3, ep=1), False),
                             (PlanFacts(3, ep=2, etp=1), False)]),
    "ep_dp_cp": (J, [(PlanFacts(2, dp=8, ep=8), False), (PlanFacts(2, dp=4, ep=8), True), (PlanFacts(2, dp=4, ep=8, etp=2), True),
                     (PlanFacts(2, dp=4, ep=8, etp=1), False), (PlanFacts(1, cp=2, dp=2, ep=8), True)]),
    "batch": (J, [(PlanFacts(1, dp=8, micro_batch=2, global_batch=64), False),
                  (PlanFacts(1, dp=8, micro_batch=3, global_batch=64), True)]),
    "interleave_microbatches": (J, [(PlanFacts(1, pp=4, vpp=2, dp=2, global_batch=16), False),   # 8 micro-batches
                                    (PlanFacts(1, pp=4, vpp=2, dp=2, global_batch=12), True),    # 6
                                    (PlanFacts(1, pp=4, dp=2, global_batch=12), False)]),
    "framework_tp": (_fw(Capabilities(tensor_parallel=False)), [(PlanFacts(2), True), (PlanFacts(1, dp=8), False)]),
    "framework_pp": (_fw(Capabilities(pipeline_parallel=False)), [(PlanFacts(1, pp=2), True), (PlanFacts(1), False)]),
    "framework_vpp": (_fw(STRUCT_CAN), [(PlanFacts(1, pp=2, vpp=2), True), (PlanFacts(1, pp=2), False)]),
    "framework_cp": (_fw(STRUCT_CAN), [(PlanFacts(1, cp=2), True), (PlanFacts(1), False)]),
    "framework_ep": (_fw(STRUCT_CAN), [(PlanFacts(1, ep=2), True), (PlanFacts(1), False)]),
    "framework_dualpipe": (J, [(PlanFacts(1, pp=4, dualpipe=True), True), (PlanFacts(1, dualpipe=True), False),
                               (PlanFacts(1, pp=4), False)]),
    "framework_etp": (_fw(STRUCT_CAN), [(PlanFacts(4, ep=2, etp=2), True), (PlanFacts(4, ep=2, etp=1), False),
                                        (PlanFacts(4, ep=2), False), (PlanFacts(4, etp=2), False)]),
    "framework_tp_overlap": (_fw(STRUCT_CAN), [(PlanFacts(2, overlap_tp=True), True), (PlanFacts(1, overlap_tp=True), False),
                                               (PlanFacts(2), False)]),
    "framework_zero": (_fw(ZERO_CAN), [(PlanFacts(1, zero_stage=1), True), (PlanFacts(1, zero_stage=2), False),
                                       (PlanFacts(1, zero_stage=3), False)]),
    "framework_zero_pp": (_fw(ZERO_CAN), [(PlanFacts(1, pp=2, zero_stage=2), True), (PlanFacts(1, pp=2, zero_stage=1), False),
                                          (PlanFacts(1, zero_stage=3), False)]),
    "framework_ddp": (_fw(ZERO_CAN), [(PlanFacts(2, dp=4, zero_stage=0), True), (PlanFacts(1, dp=4, zero_stage=0), False),
                                      (PlanFacts(2, dp=1, zero_stage=0), False), (PlanFacts(1, cp=2, zero_stage=0), True),
                                      (PlanFacts(2, dp=4, zero_stage=3), False)]),
}


def test_every_rule_has_hand_checked_cases() -> None:
    assert set(CASES) == set(RULE_NAMES)


def _stack(plans: list[PlanFacts]) -> PlanFacts:
    fields = {}
    for name in PlanFacts.__dataclass_fields__:
        values = [getattr(p, name) for p in plans]
        if name in ("first_stage_layers", "last_stage_layers"):
            fields[name] = values[0]
        elif name == "etp":
            fields[name] = np.array([v if v is not None else p.tp for v, p in zip(values, plans)])
        elif name == "global_batch":
            fields[name] = np.array([v if v is not None else 64 for v in values])
        else:
            fields[name] = np.array(values)
    return PlanFacts(**fields)


@pytest.mark.parametrize("name", RULE_NAMES)
def test_rule_on_ints_and_on_arrays(name: str) -> None:
    j, cases = CASES[name]
    r = rule(name)
    got = [bool(r.broken(j, p)) for p, _ in cases]
    assert got == [want for _, want in cases]
    assert list(np.asarray(r.broken(j, _stack([p for p, _ in cases])), dtype=bool)) == got
    for p, want in cases:
        if want:   # one line naming a plan field, with the fix
            err = r.error(j, p)
            assert isinstance(err, RuleBroken) and err.rule == name and err.field.startswith("plan")
            assert err.fix and "\n" not in err.one_line()


def test_first_broken_index_is_first_broken_element_wise() -> None:
    rng = random.Random(3)
    plans = [PlanFacts(rng.choice([1, 2, 3, 8, 16]), pp=rng.choice([1, 2, 4, 64]), vpp=rng.choice([1, 2]),
                       cp=rng.choice([1, 2, 3]), dp=rng.choice([1, 2, 4, 8]), ep=rng.choice([1, 2, 8]),
                       micro_batch=rng.choice([1, 2, 3]), global_batch=rng.choice([16, 24, 64]),
                       zero_stage=rng.choice([0, 1, 2, 3]), overlap_tp=rng.choice([False, True]))
             for _ in range(400)]
    j = _fw(Capabilities(zero_stages=(0, 3), sharded_grads_with_pp=False, ddp_with_model_parallel=False,
                         interleaved_pp=False, tp_overlap=False))
    idx = first_broken_index(j, _stack(plans))
    for p, i in zip(plans, idx):
        r = first_broken(j, p)
        assert (RULES[i] if i >= 0 else None) is r


def test_table_order_follows_the_search_stages() -> None:
    """The search checks rules loop level by loop level: the table must list them in that order,
    so that the first rule broken is the same for check_plan and the search."""
    order = [STAGES.index(r.stage) for r in RULES]
    assert order == sorted(order)
    today = ["tp_heads", "tp_kv_heads", "tp_ffn", "tp_nodes", "tp_overlap_nodes", "vpp_without_pp", "layer_split",
             "cp_seq_len", "etp_expert_width", "ep_dp_cp", "batch", "interleave_microbatches", "memory"]
    assert [k for k in PRUNE_REASONS if k in today] == today       # the stable JSON keys, in their order
    assert set(PRUNE_REASONS) == {r.name for r in RULES if r.stage not in ("job", "size")} | {"memory"}
    assert {r.name for r in RULES if r.stage in ("job", "size")} == {"precision_gpu", "gpus"}


def test_a_precision_the_gpu_has_no_peak_for_is_refused_not_priced() -> None:
    """FP8 on an A100 was priced at the BF16 peak (GPUSpec.peak's fallback); now predict and the search refuse it."""
    with pytest.raises(RuleBroken, match="a100-80gb has no FP8") as err:
        make_job(load_model("gpt3-125m"), cluster_for_gpu("a100-80gb", 8), make_plan(tp=1, precision="fp8"), 2048)
    assert err.value.rule == "precision_gpu" and err.value.field == "plan.precision"
    with pytest.raises(RuleBroken, match="no FP8"):
        make_space(load_model("gpt3-125m"), cluster_for_gpu("a100-80gb", 8), 64, 2048, precision="fp8")
    assert make_space(load_model("gpt3-125m"), cluster_for_gpu("h100-sxm", 8), 64, 2048, precision="fp8").precision == "fp8"


# ---- check_plan and the search agree -----------------------------------------------------------------
TINY = ModelSpec(name="tiny", num_layers=4, hidden_size=256, num_heads=8, num_kv_heads=4, ffn_hidden_size=1024,
                 vocab_size=1000, max_seq_len=512, activation="swiglu", norm="rmsnorm", positions="rope", bias=False)


def _candidates(sp):
    """Every raw candidate of a space with the reason the search's staged checks give it."""
    for (tp, pp, cp, dp), vpp, ep, mb in itertools.product(sp.factorizations(), sp.vpp_domain, sp.ep_domain,
                                                           sp.mb_domain):
        dp_cp = dp * cp
        structural = (sp.tp_reason(tp) or sp.layout_reason(pp, vpp, cp) or sp.ep_reason(ep, dp_cp, tp)
                      or sp.batch_reason(dp, mb, pp, vpp) or sp.framework_reason(tp, vpp, cp, ep))
        for spf, rc, opp, z in itertools.product(sp.sp_domain(tp), sp.recompute_domain, sp.overlap_pp_domain(pp),
                                                 sp.zero_domain(dp_cp)):
            for otp, opg, odp in itertools.product(sp.overlap_tp_domain(tp, spf), sp.overlap_param_gather_domain(dp_cp, z),
                                              sp.overlap_dp_domain(dp_cp, z, pp)):
                plan = dict(tp=tp, pp=pp, vpp=vpp, cp=cp, dp=dp, ep=ep, micro_batch=mb, sp=spf, recompute=rc,
                            overlap_tp_comm=otp, overlap_pp_comm=opp, zero_stage=z, overlap_param_gather=opg,
                            overlap_dp_comm=odp, global_batch=sp.global_batch)
                yield plan, structural or sp.option_reason(tp, pp, cp, dp, z, otp, spf)


@pytest.mark.parametrize("model,framework,fix", [
    (TINY, "megatron", None), (TINY, "deepspeed", None), (TINY, "torchtitan", None),
    (TINY, "pytorch-eager", "overlap_tp_comm=1"), ("mixtral-8x7b", "torchtitan", "etp=2,recompute=full,sp=1"),
    ("mixtral-8x7b", "pytorch-eager", "recompute=full,sp=1"), (TINY, "megatron", "overlap_tp_comm=1"),
    (TINY, "megatron", "overlap_tp_comm=1,sp=0"),
])
def test_search_pruning_and_check_plan_name_the_same_rule(model, framework, fix) -> None:
    m = load_model(model) if isinstance(model, str) else model
    seq = 512 if m is TINY else 4096
    sp = make_space(m, cluster_for_gpu("h100-sxm", 16), 16, seq, framework=framework, fix=fix)
    cands = list(_candidates(sp))
    # the counts the search keeps are the reasons of the candidates, one by one
    valid, pruned, total = sp.structures()
    counts: dict[str, int] = {}
    for _, reason in cands:
        if reason:
            counts[reason] = counts.get(reason, 0) + 1
    assert total == len(cands) and pruned == counts
    assert all(k in PRUNE_REASONS for k in counts)
    # a sample: check_plan refuses each pruned plan by the same rule, and accepts the others
    rng = random.Random(11)
    fixed = {k: v for k, v in sp.fixed.items() if k == "etp"}
    for plan, reason in rng.sample(cands, min(250, len(cands))):
        try:
            make_job(m, sp.cluster, make_plan(**plan, **fixed), seq, framework)
            refused = None
        except RuleBroken as e:
            refused = e.rule
        assert refused == reason, (plan, refused, reason)


def test_search_never_proposes_what_the_framework_cannot_run() -> None:
    r = search("llama3-8b", gpu="h100-sxm", num_gpus=32, global_batch=64, seq_len=4096, framework="deepspeed",
               top=20, pareto_points=1)
    assert r.evaluated == r.feasible + sum(r.pruned.values())
    assert {"framework_vpp", "framework_cp", "framework_zero_pp"} <= set(r.pruned)
    for p in r.plans:
        plan = p.prediction.job.plan
        assert plan.vpp == 1 and plan.cp == 1 and not (plan.pp > 1 and plan.zero_stage >= 2)
        check_plan(p.prediction.job.model, p.prediction.job.cluster, plan, 4096, "deepspeed")
    tt = search("llama3-8b", gpu="h100-sxm", num_gpus=16, global_batch=32, seq_len=4096, framework="torchtitan",
                top=20, pareto_points=1)
    assert "framework_zero" in tt.pruned and all(p.prediction.job.plan.zero_stage in (0, 2, 3) for p in tt.plans)


# ---- check_plan refuses, one line, exit 2 --------------------------------------------------------------
@pytest.mark.parametrize("framework,plan,rule_name,field", [
    ("deepspeed", "tp=1,pp=2,zero=3", "framework_zero_pp", "plan.zero_stage"),
    ("deepspeed", "tp=1,pp=2,vpp=2,zero=1", "framework_vpp", "plan.vpp"),
    ("deepspeed", "tp=1,cp=2,zero=1", "framework_cp", "plan.cp"),
    ("torchtitan", "tp=1,zero=1", "framework_zero", "plan.zero_stage"),
    ("torchtitan", "tp=2,zero=0", "framework_ddp", "plan.zero_stage"),
    ("pytorch-eager", "tp=2,sp=1,overlap_tp_comm=1", "framework_tp_overlap", "plan.overlap_tp_comm"),
    ("llm-foundry-triton", "tp=2,zero=3", "framework_tp", "plan.tp"),       # MPT has no model-parallel layers
    ("llm-foundry-flash", "tp=1,pp=2,zero=0", "framework_pp", "plan.pp"),
])
def test_capability_refusals(framework, plan, rule_name, field, capsys) -> None:
    from clustertwin.specs import parse_plan
    c = cluster_for_gpu("h100-sxm", 8)
    with pytest.raises(RuleBroken) as err:
        make_job(load_model("llama3-8b"), c, parse_plan(plan, global_batch=16), 4096, framework)
    assert err.value.rule == rule_name and err.value.field == field and framework in err.value.problem
    make_job(load_model("llama3-8b"), c, parse_plan(plan, global_batch=16), 4096, "megatron")   # megatron runs it
    code = main(["predict", "--gpu", "h100-sxm", "-n", "8", "-m", "llama3-8b", "--plan", plan, "--global-batch", "16",
                 "--seq-len", "4096", "--framework", framework])
    out = capsys.readouterr().err
    assert code == 2 and out.startswith(f"error: {field}:") and out.count("\n") == 1


def test_ep_for_a_framework_without_it() -> None:
    with pytest.raises(RuleBroken, match="framework_ep|no expert parallelism") as err:
        make_job(load_model("mixtral-8x7b"), cluster_for_gpu("h100-sxm", 16), make_plan(ep=8, global_batch=16), 4096,
                 "pytorch-compile")
    assert err.value.rule == "framework_ep"


# ---- docs ------------------------------------------------------------------------------------------------
def test_docs_show_the_rule_and_capability_tables() -> None:
    text = DOCS.read_text()
    assert rules_markdown() in text
    assert capabilities_markdown() in text
    for name in FRAMEWORK_PROFILES:
        assert get_framework(name).capabilities is FRAMEWORK_PROFILES[name].capabilities


def test_tp_overlap_needs_sequence_parallelism(capsys) -> None:
    """Megatron-LM asserts tp_comm_overlap => sequence_parallel (arguments.py, validate_args): asking for it
    without sp is one line and exit 2; without asking, a plan without sp runs with no TP overlap; the search
    prunes it by name when overlap is held on."""
    from clustertwin.specs import parse_plan
    from clustertwin.workload.graph import build_graph
    m, c = load_model("llama3-8b"), cluster_for_gpu("h100-sxm", 8)
    with pytest.raises(RuleBroken) as err:
        make_job(m, c, parse_plan("tp=8,sp=0,overlap_tp_comm=1", global_batch=16), 4096, "megatron")
    assert err.value.rule == "tp_overlap_sp" and "sp=1" in err.value.fix
    code = main(["predict", "--gpu", "h100-sxm", "-n", "8", "-m", "llama3-8b", "--plan", "tp=8,sp=0,overlap_tp_comm=1",
                 "--global-batch", "16", "--seq-len", "4096"])
    out = capsys.readouterr()
    assert code == 2 and out.err.count("\n") == 1 and out.err.startswith("error: plan.overlap_tp_comm")
    no_sp = build_graph(make_job(m, c, parse_plan("tp=8,sp=0", global_batch=16), 4096, "megatron-core@2024"))
    with_sp = build_graph(make_job(m, c, parse_plan("tp=8,sp=1", global_batch=16), 4096, "megatron-core@2024"))
    assert no_sp.plan.overlap_tp_comm is False and with_sp.plan.overlap_tp_comm is True
    r = search(m, gpu="h100-sxm", num_gpus=8, global_batch=16, seq_len=4096, fix="tp=8,overlap_tp_comm=1", top=3,
               pareto_points=1)
    assert r.pruned.get("tp_overlap_sp", 0) > 0 and all(p.prediction.job.plan.sp for p in r.plans)
