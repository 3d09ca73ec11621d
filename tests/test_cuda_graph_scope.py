"""CUDA graph scopes (Megatron-Core cuda_graph_impl="transformer_engine", cuda_graph_scope): the kernels of
a captured region cost the host no launch time of their own, one graph replay per region and phase instead;
the rest of the layer pays its launches as before."""
from __future__ import annotations

import subprocess
import sys

import pytest

import clustertwin as ct
from clustertwin.constants import value
from clustertwin.cost.compute import ComputePricer, graph_captured
from clustertwin.errors import PlanError
from clustertwin.catalog import load_gpu
from clustertwin.cost.profile import default_profile
from clustertwin.specs.framework import get_framework
from clustertwin.specs.plan import make_plan, parse_plan
from clustertwin.validate.runs import job_from_row, read_runs
from clustertwin.workload.transformer import layer_ops
from layer_contexts import qwen3_moe_ctx as _ctx

REPLAY = value("host.cuda_graph_replay_s")


def _pricer(scope=None) -> ComputePricer:
    gpu = load_gpu("h100-sxm")
    return ComputePricer(gpu, default_profile(gpu), get_framework("megatron"), cuda_graph_scope=scope)


def _host(ops, pricer) -> float:
    return sum(pricer.host_time(op) for op in ops)


def test_scope_text_parses_and_canonicalises():
    assert parse_plan("tp=1,cuda_graph_scope=moe_preprocess+moe_router").cuda_graph_scope == (
        "moe_preprocess", "moe_router")
    assert parse_plan("tp=1,cuda_graph_scope=none").cuda_graph_scope is None
    assert parse_plan("tp=1").cuda_graph_scope is None


def test_router_and_preprocess_graph_removes_exactly_their_launches():
    fwd, bwd, _ = layer_ops(_ctx(), True)
    scope = ("moe_preprocess", "moe_router")
    eager, graphed = _pricer(), _pricer(scope)
    captured = [op for op in fwd if graph_captured(op, scope)]
    names = {op.name for op in captured}
    assert {"norm2", "moe.router", "moe.topk", "moe.token_counts", "moe.permute"} <= names
    # the D2H read-back waits before the all-to-all, outside the graph; experts and attention stay eager
    assert not names & {"moe.dtoh_sync", "moe.dispatch", "moe.expert.up", "attn.qkv", "norm1"}
    # hand check: forward host time drops by the captured ops' launches and gains one replay
    saved = _host(captured, eager)
    assert _host(fwd, graphed) == pytest.approx(_host(fwd, eager) - saved + REPLAY)
    # one replay in the backward as well
    assert sum(1 for op in bwd if graphed.host_time(op) == REPLAY and graph_captured(op, scope)) == 1


@pytest.mark.parametrize("scope", [("attn",), ("attn", "moe_preprocess", "moe_router"), ("layer",)])
def test_more_capture_never_more_host_time(scope):
    fwd, bwd, _ = layer_ops(_ctx(moe_pad_capacity=1.0), True)
    eager, graphed = _pricer(), _pricer(scope)
    for ops in (fwd, bwd):
        assert _host(ops, graphed) <= _host(ops, eager)
    if scope == ("layer",):   # the whole layer: one replay per phase
        assert _host(fwd, graphed) == pytest.approx(REPLAY) and _host(bwd, graphed) == pytest.approx(REPLAY)


def test_graphs_never_slower_and_gpu_work_unchanged():
    kw = dict(gpu="b200", num_gpus=8, micro_batch=1, global_batch=64, seq_len=4096)
    eager = ct.predict("qwen3-30b-a3b", plan="tp=1,ep=8", **kw)
    graphed = ct.predict("qwen3-30b-a3b", plan="tp=1,ep=8,cuda_graph_scope=moe_router+moe_preprocess", **kw)
    assert graphed.step_time_s <= eager.step_time_s
    assert graphed.model_flops_per_step == eager.model_flops_per_step


@pytest.mark.parametrize("fields, match", [
    (dict(cuda_graph_scope="moe_preprocess"), "only with moe_router"),
    (dict(cuda_graph_scope="layer+attn"), "whole layer"),
    (dict(cuda_graph_scope="attn", recompute="full"), "full recomputation"),
    (dict(cuda_graph_scope="layer", recompute="selective"), "whole-layer"),
    (dict(cuda_graph_scope="moe_router+moe_preprocess", moe_capacity_factor=1.0), "reads token counts"),
    (dict(cuda_graph_scope="mlp"), "cuda_graph_scope"),
])
def test_plan_refuses_what_megatron_core_refuses(fields, match):
    with pytest.raises(PlanError, match=match):
        make_plan(tp=1, **fields)


def test_job_refuses_other_frameworks_dense_moe_scopes_and_dropless_layer_graphs():
    with pytest.raises(PlanError, match="Megatron-Core"):
        ct.predict("qwen3-30b-a3b", gpu="h100", num_gpus=8, plan="tp=1,ep=8,cuda_graph_scope=attn",
                   framework="torchtitan", global_batch=8, seq_len=4096)
    with pytest.raises(PlanError, match="needs an MoE model"):
        ct.predict("llama3-8b", gpu="h100", num_gpus=8, plan="tp=1,cuda_graph_scope=moe_router",
                   global_batch=8, seq_len=2048)
    with pytest.raises(PlanError, match="dropless"):
        ct.predict("qwen3-30b-a3b", gpu="h100", num_gpus=8, plan="tp=1,ep=8,cuda_graph_scope=layer",
                   global_batch=8, seq_len=4096)
    ct.predict("llama3-8b", gpu="h100", num_gpus=8, plan="tp=1,cuda_graph_scope=layer", global_batch=8,
               seq_len=2048)   # a dense layer captures whole


def test_cli_refuses_in_one_line_with_exit_2():
    r = subprocess.run([sys.executable, "-m", "clustertwin", "predict", "--model", "llama3-8b", "--gpu", "h100",
                        "--num-gpus", "8", "--plan", "tp=1,cuda_graph_scope=moe_preprocess"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and "cuda_graph_scope" in (r.stderr + r.stdout)


def test_validation_rows_carry_the_release_presets_scope():
    rows = {r.raw["run_id"]: r for r in read_runs("data/validation/moe_public_runs.csv")}
    for rid, scope in (("mbridge25.11-b200-qwen3-30b-a3b-mxfp8-8gpu", ("moe_preprocess", "moe_router")),
                       ("mbridge26.02-b200-qwen3-30b-a3b-mxfp8-8gpu", ("moe_preprocess", "moe_router")),
                       ("mbridge25.11-h100-qwen3-30b-a3b-fp8cs-16gpu", None),
                       ("mbridge26.02-h100-qwen3-30b-a3b-fp8-16gpu", None)):
        assert job_from_row(rows[rid]).plan.cuda_graph_scope == scope
