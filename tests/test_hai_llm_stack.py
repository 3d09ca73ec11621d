"""DeepSeek's HAI-LLM stack (specs/framework.py ``hai-llm``) and the DualPipe schedule it runs
(DeepSeek-V3 Technical Report, arXiv 2412.19437, Sec. 3.2.1 / Table 2, 3.2.3, 3.3.3)."""
from __future__ import annotations

import pytest

import clustertwin as ct
from clustertwin.constants import value
from clustertwin.errors import PlanError
from clustertwin.schedule.memory import DUALPIPE, in_flight, layer_activation_bytes, stage_memory
from clustertwin.schedule.step import StageTime, compose_step, dualpipe_exposed_ep, dualpipe_rank
from clustertwin.specs.framework import get_framework, resolve_stack
from clustertwin.specs.plan import parse_plan
from clustertwin.validate.runs import MeasuredRow, job_from_row
from clustertwin.workload.graph import layer_context, recompute_mode, recompute_ops, layer_ops


# ---- the plan's spelling ----------------------------------------------------------------------------
def test_dualpipe_is_spelled_like_the_other_schedule_options() -> None:
    for text in ("pp=4,pp_schedule=dualpipe", "pp=4,schedule=dualpipe", "pp=4,dualpipe", "pp=4,schedule=DualPipe"):
        assert parse_plan(text).pp_schedule == "dualpipe"
    assert "schedule=dualpipe" in parse_plan("pp=4,dp=2,dualpipe").short()
    assert parse_plan("pp=4").pp_schedule is None           # the framework's default


@pytest.mark.parametrize("text", ["pp=3,dualpipe", "pp=4,vpp=2,dualpipe", "pp=4,schedule=zb"])
def test_dualpipe_refuses_what_it_cannot_run(text: str) -> None:
    with pytest.raises(PlanError):
        parse_plan(text)


# ---- the stack --------------------------------------------------------------------------------------
def test_hai_llm_profile_holds_the_reports_options() -> None:
    fw = get_framework("hai-llm")
    assert fw.pp_schedule == "dualpipe" and fw.moe_dispatcher == "deepep"
    assert fw.adam_moments_bf16 and fw.fp8_activation_cache
    assert recompute_mode("selective", fw) == "selective_norm_up"
    assert resolve_stack("hai-llm")[0] == "hai-llm"
    assert get_framework("megatron").pp_schedule == "1f1b"


def _ctx(**plan):
    model = ct.catalog.load_model("deepseek-v3")
    p = parse_plan("tp=1,pp=16,ep=64,dp=128,micro_batch=1", **plan)
    return layer_context(model, p, 4096, get_framework("hai-llm"))


def test_norm_up_activations_by_hand() -> None:
    """DeepSeek-V3's MoE layer per token (Sec. 3.2.3, 3.3.3): 169,952 bytes with FP8 caches; the same
    tensors in BF16 without them; both far below what the layer keeps with nothing recomputed."""
    c = _ctx(precision="fp8")
    fp8 = layer_activation_bytes(c, True, "selective_norm_up", fp8_cache=True) / c.tokens
    assert fp8 == 169952
    bf16 = layer_activation_bytes(c, True, "selective_norm_up", fp8_cache=False) / c.tokens
    # Linear inputs and SwiGLU inputs in 2 bytes, the attention output in 2
    assert bf16 == (2 * 14336 + 2 * 7168 * 2 + 2 * 2112 + 16384 * 2 + 512 + 32 + (8 * 7168 + 9 * 4096) * 2)
    assert fp8 < bf16 < layer_activation_bytes(c, True, "none") / c.tokens


def test_norm_up_recomputes_norms_up_projections_and_swiglu() -> None:
    c = _ctx(precision="fp8")
    fwd, _, core = layer_ops(c, True)
    names = {op.name for op in recompute_ops("selective_norm_up", fwd, core, c, True)}
    assert {"norm1", "norm2", "attn.q_up", "attn.kv_up"} <= names
    assert any(n.endswith(".act") for n in names)
    assert not any(n.startswith("attn.flash") for n in names)        # the attention core is not repeated
    assert not {"attn.q_down", "attn.kv_down", "attn.proj"} & names


def test_bf16_moments_price_eight_bytes_per_parameter() -> None:
    fw = get_framework("hai-llm")
    kw = dict(dense=1e9, expert=0.0, dp_cp=1, edp=1, layers_dense=1, layers_moe=0, act_dense=0.0, act_moe=0.0,
              act_full_layer=0.0, in_flight_layers=0)
    assert stage_memory(fw, "bf16", 0, **kw)["optimizer"] == 8e9
    assert stage_memory(get_framework("megatron"), "bf16", 0, **kw)["optimizer"] == 12e9
    assert value("memory.adam_bytes_per_param_bf16_moments") == 8


# ---- DualPipe's formulas ----------------------------------------------------------------------------
def test_dualpipe_holds_pp_plus_one_microbatches_over_its_two_stages() -> None:
    p, layers = 16, 4
    pair = in_flight(p, DUALPIPE, 120, 2, layers) + in_flight(p, DUALPIPE, 120, p - 3, layers)
    assert pair == (p + 1) * layers
    assert in_flight(p, DUALPIPE, 6, 0, layers) == 6 * layers / 2       # never more than the step's micro-batches


def _stage(stage: int, f: float, b: float, w: float, a2a: float = 0.0, **kw) -> StageTime:
    return StageTime(stage, fwd_s=f, bwd_s=b, wgrad_s=w, ep_s=a2a, **kw)


def test_dualpipe_rank_runs_half_the_microbatches_through_each_stage() -> None:
    r = dualpipe_rank(_stage(0, 1.0, 2.0, 0.5, dp_sync_s=3.0), _stage(3, 3.0, 4.0, 1.5, dp_sync_s=1.0), 0)
    assert (r.fwd_s, r.bwd_s, r.wgrad_s) == (2.0, 3.0, 1.0)
    assert r.dp_sync_s == 4.0                 # both stages' gradients are reduced


def test_dualpipe_bubble_is_table_2s() -> None:
    """(PP/2 - 1)(F&B + B - 3W), with identical ranks and no communication: F&B = F + B."""
    p, m, f, b, w = 8, 32, 1.0, 2.0, 0.6
    ranks = [_stage(i, f, b, w) for i in range(p)]
    breakdown, _ = compose_step(ranks, list(range(p)), [1e9] * p, m, p, 1, True, True, True, dualpipe_sms=132)
    assert breakdown["bubble"] == pytest.approx((p / 2 - 1) * ((f + b) + b - 3 * w))
    one_f_one_b, _ = compose_step(ranks, list(range(p)), [1e9] * p, m, p, 1, True, True, True)
    assert one_f_one_b["bubble"] == pytest.approx((p - 1) * (f + b))
    assert breakdown["bubble"] < one_f_one_b["bubble"]


@pytest.mark.parametrize("a2a", [0.5, 2.0, 10.0])
def test_dualpipe_overlap_exposes_the_sm_share_or_what_outlasts_the_compute(a2a: float) -> None:
    st = _stage(0, 1.0, 2.0, 0.5, a2a)
    share = value("schedule.dualpipe_comm_sms") / 132
    exposed = dualpipe_exposed_ep(st, 132)
    assert exposed == pytest.approx(max(share * a2a, a2a - 3.0))
    assert exposed <= a2a                                          # never worse than exposing it all
    breakdown, _ = compose_step([st, st], [0, 1], [1e9, 1e9], 10, 2, 1, True, True, True, dualpipe_sms=132)
    # p = 2: the reference order runs 3 of the 10 forwards (and backwards) alone, all-to-alls exposed:
    # 2 F (step 2), and the middle rank's first step-4 pair split (dualpipe_unpaired)
    per_mb = 0.3 * a2a + 0.7 * exposed
    assert breakdown["ep_comm"] == pytest.approx(10 * per_mb)
    assert breakdown["bubble"] == 0.0                              # p/2 - 1 = 0
    assert sum(breakdown.values()) == pytest.approx(10 * (3.0 + per_mb) + breakdown["optimizer"] +
                                                    breakdown["dp_comm"] + breakdown["pp_comm"] + breakdown["other"])


# ---- end to end -------------------------------------------------------------------------------------
def _predict(plan: str, framework: str = "hai-llm"):
    return ct.predict("deepseek-v3", cluster="deepseek-v3-h800", seq_len=4096, global_batch=15360, micro_batch=1,
                      precision="fp8", framework=framework, plan=plan)


def test_dualpipe_is_the_stacks_default_and_the_plan_can_say_1f1b() -> None:
    base = "tp=1,pp=16,ep=64,dp=128,zero=1,recompute=selective"
    default, dual, one = _predict(base), _predict(base + ",schedule=dualpipe"), _predict(base + ",schedule=1f1b")
    assert default.step_time_s == pytest.approx(dual.step_time_s)
    assert one.step_time_s > dual.step_time_s            # the all-to-alls exposed, the 1F1B bubble
    assert one.memory.total_bytes < dual.memory.total_bytes   # one copy of the parameters
    assert sum(one.breakdown_s.values()) == pytest.approx(one.step_time_s)
    assert sum(dual.breakdown_s.values()) == pytest.approx(dual.step_time_s)


def test_dualpipe_is_refused_where_the_framework_has_none() -> None:
    """Megatron-Core has no DualPipe: a megatron plan asking for it is refused (rule framework_dualpipe),
    not priced; on the stack that runs it, DualPipe hides the all-to-alls 1F1B exposes."""
    with pytest.raises(PlanError, match="pp_schedule"):
        _predict("tp=1,pp=16,ep=64,dp=128,zero=1,moe_dispatcher=deepep,dualpipe", framework="megatron")
    pred = _predict("tp=1,pp=16,ep=64,dp=128,zero=1,moe_dispatcher=deepep,dualpipe", framework="hai-llm")
    plain = _predict("tp=1,pp=16,ep=64,dp=128,zero=1,moe_dispatcher=deepep,schedule=1f1b", framework="hai-llm")
    assert pred.breakdown_s["ep_comm"] < plain.breakdown_s["ep_comm"]


def test_odd_pp_on_the_stack_runs_1f1b() -> None:
    """The stack's default applies where DualPipe can run; an odd pipeline runs 1F1B."""
    def run(plan: str):
        return ct.predict("deepseek-v3", gpu="h800", num_gpus=192, seq_len=4096, global_batch=1920, micro_batch=1,
                          precision="fp8", framework="hai-llm", plan=plan)
    base = "tp=1,pp=3,ep=64,dp=64,zero=1,recompute=selective"
    assert run(base).step_time_s == pytest.approx(run(base + ",schedule=1f1b").step_time_s)


def test_validate_states_the_schedule_a_row_cannot_name() -> None:
    row = {"run_id": "x", "model_preset": "deepseek-v3", "cluster": "deepseek-v3-h800", "num_gpus": "2048",
           "tp": "1", "pp": "16", "dp": "128", "ep": "64", "zero_stage": "1", "recompute": "selective",
           "micro_batch": "1", "global_batch": "15360", "seq_len": "4096", "precision": "fp8",
           "framework": "hai-llm", "metric": "tokens_per_s_per_gpu", "value": "1543.2"}
    r = MeasuredRow("x", "tokens_per_s_per_gpu", 1543.2, row, 1)
    job_from_row(r)
    assert any("pipeline schedule unknown: dualpipe (hai-llm default)" in n for n in r.assumptions)


def test_the_replay_schedules_dualpipe() -> None:
    """The replay runs DualPipe's order (sim/dualpipe.py; more in tests/test_sim_dualpipe.py): on a dense
    two-stage pipeline (no all-to-alls, no bubble in (p/2 - 1)(F&B + B - 3W)) it agrees with predict."""
    from clustertwin.predict import make_training_job, predict_job
    from clustertwin.sim.replay import simulate
    job = make_training_job("gpt3-125m", gpu="h100", num_gpus=8, plan="tp=2,pp=2,dp=2,dualpipe", micro_batch=1,
                            global_batch=8, seq_len=1024, framework="hai-llm")
    assert simulate(job).step_time_s == pytest.approx(predict_job(job).mean_gpu_step_time_s, rel=0.03)


def test_search_on_the_stack_prices_odd_pipelines_as_1f1b() -> None:
    """The stack's DualPipe default applies to even pipelines only: a searched plan with pp=3 is the
    same as the one holding schedule=1f1b; with pp=2 it runs DualPipe."""
    from clustertwin.search import search
    kw = dict(gpu="h100", num_gpus=48, seq_len=1024, global_batch=96, framework="hai-llm")

    def best(plan: str) -> float:
        return search("mixtral-8x7b", fix=plan, top=1, **kw).plans[0].prediction.step_time_s

    plan = "tp=1,pp=3,ep=8,dp=16,zero=1,recompute=full,cp=1,vpp=1,mb=1,ovl=dp+pg+pp"
    assert best(plan) == pytest.approx(best(plan + ",schedule=1f1b"))
    even = "tp=1,pp=2,ep=8,dp=24,zero=1,recompute=full,cp=1,vpp=1,mb=1,ovl=dp+pg+pp"
    assert best(even) == pytest.approx(best(even + ",schedule=dualpipe"))
    assert best(even) != pytest.approx(best(even + ",schedule=1f1b"))
