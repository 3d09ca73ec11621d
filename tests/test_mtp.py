"""Multi-token prediction (DeepSeek-V3 Technical Report, arXiv 2412.19437, Sec. 2.2): each of the model's
``mtp_depth`` modules runs on the last pipeline stage as the shared embedding, two RMSNorms, a 2h -> h
projection, one more transformer block and the shared output head."""
from __future__ import annotations

import pytest

from clustertwin.catalog import cluster_for_gpu, load_model
from clustertwin.calibrate.profile import profile_for
from clustertwin.errors import DataError
from clustertwin.predict import make_training_job, predict_job
from clustertwin.schedule.batch import BatchPricer, TopK, plan_set_of
from clustertwin.validate.runs import model_from_row
from clustertwin.workload.graph import build_graph, layer_params_per_rank
from clustertwin.workload.ops import Phase

PLAN = "tp=1,pp=2,ep=4,dp=4,zero=1"


def _job(depth: int):
    m = load_model("qwen1.5-moe-a2.7b").model_copy(update={"mtp_depth": depth})
    return make_training_job(m, cluster=cluster_for_gpu("h100-sxm", 8), plan=PLAN, micro_batch=1,
                             global_batch=32, seq_len=2048)


def _flops(stage, phase: Phase) -> float:
    return sum(op.flops * rep for op, rep in stage.ops(phase))


def test_the_catalog_model_trains_one_module() -> None:
    """DeepSeek-V3 Sec. 4.2: MTP depth D = 1; the HF config says the same (num_nextn_predict_layers)."""
    assert load_model("deepseek-v3").mtp_depth == 1
    assert load_model("kimi-k2").mtp_depth == 0


def test_last_stage_runs_a_block_a_projection_and_the_head_again() -> None:
    """By hand: the last stage's forward FLOPs grow by one MoE layer, the head, the 2h -> h
    projection (2 x tokens x h x 2h) and the module's two RMSNorms; the first stage is untouched."""
    g0, g1 = build_graph(_job(0)), build_graph(_job(1))
    m, ctx = g1.job.model, g1.context
    last0, last1 = g0.stages[-1], g1.stages[-1]
    layer = next(b for b in last0.blocks if b.name == "moe_layer")
    head = next(b for b in last0.blocks if b.name == "head")
    layer_f = sum(op.flops for op in layer.fwd)
    head_f = sum(op.flops for op in head.fwd)
    proj = 2.0 * ctx.tokens * m.hidden_size * 2 * m.hidden_size
    head1 = next(b for b in last1.blocks if b.name == "head")
    norms = [op.flops for op in head1.fwd if op.name.startswith("mtp.norm")]
    assert len(norms) == 2
    extra = layer_f + head_f + proj + sum(norms)
    assert _flops(last1, Phase.FWD) - _flops(last0, Phase.FWD) == pytest.approx(extra, rel=1e-12)
    assert _flops(g1.stages[0], Phase.FWD) == _flops(g0.stages[0], Phase.FWD)
    assert _flops(last1, Phase.BWD) > _flops(last0, Phase.BWD)


def test_last_stage_holds_the_module_parameters() -> None:
    g0, g1 = build_graph(_job(0)), build_graph(_job(1))
    m, plan = g1.job.model, g1.plan
    d, e = layer_params_per_rank(m, m.num_layers, plan)
    extra = d + 2 * m.hidden_size ** 2 / plan.tp + 3 * m.norm_params
    assert g1.stages[-1].params.dense - g0.stages[-1].params.dense == pytest.approx(extra)
    assert g1.stages[-1].params.expert - g0.stages[-1].params.expert == pytest.approx(e)
    assert g1.stages[0].params == g0.stages[0].params


def test_more_modules_never_faster() -> None:
    times = [predict_job(_job(d)).step_time_s for d in (0, 1, 2)]
    assert times[0] < times[1] < times[2]


def test_search_prices_the_module_as_predict_does() -> None:
    """The batch pricer (search) puts the MTP modules where build_graph does: the same step time."""
    job = _job(1)
    pred = predict_job(job)
    alone, s = plan_set_of(pred.graph.plan, job.model, job.cluster, 2048, job.framework)
    keep = TopK(10**6)
    BatchPricer(alone, profile_for(job.cluster.gpu)).price([s], keep)
    best = [t for t, *_ in keep.best()]
    assert len(best) == 1 and best[0] == pytest.approx(pred.step_time_s, rel=1e-12)


def _row(**cells) -> dict:
    base = {"run_id": "r", "model_preset": "deepseek-v3", "layers": "61", "hidden": "7168", "heads": "128"}
    return {**base, **cells}


def test_a_row_says_whether_the_run_trained_the_module() -> None:
    notes: list[str] = []
    assert model_from_row(_row(mtp_depth="0"), notes).mtp_depth == 0 and not notes
    assert model_from_row(_row(), notes).mtp_depth == 1
    assert any("mtp_depth unknown" in n for n in notes)
    with pytest.raises(DataError, match="mtp_depth"):
        model_from_row(_row(mtp_depth="-1"))


def test_hf_config_gives_the_depth() -> None:
    """config.json num_nextn_predict_layers (DeepSeek-V3: 1) is the model's MTP depth."""
    from pathlib import Path
    hf = load_model(Path(__file__).parent / "data" / "hf" / "deepseek-v3.json")
    assert hf.mtp_depth == load_model("deepseek-v3").mtp_depth == 1
