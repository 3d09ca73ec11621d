"""Token-drop-and-pad MoE (Megatron-Core moe_expert_capacity_factor with moe_pad_expert_input_to_capacity,
the setting of NeMo's Grok-1 v24.11 recipe and of Megatron-Bridge's 25.09 performance runs): static
shapes, so no token counts are gathered or read back to the host, and every expert runs its capacity."""
from __future__ import annotations

import math

import pytest

import clustertwin as ct
from clustertwin.errors import PlanError
from clustertwin.specs.plan import make_plan
from clustertwin.validate.runs import job_from_row, read_runs
from clustertwin.workload.transformer import layer_ops
from layer_contexts import qwen3_moe_ctx as _ctx

HEADER = ("run_id,source,source_url,model,arch,layers,hidden,heads,kv_heads,ffn_hidden,vocab,seq_len,moe_experts,"
          "moe_topk,gpu,num_gpus,gpus_per_node,tp,pp,vpp,dp,cp,ep,sp,zero_stage,recompute,micro_batch,global_batch,"
          "precision,framework,metric,value,notes,moe_capacity_factor,moe_pad_to_capacity\n")
ROW = ("moe,t,,m,mixtral,4,1024,8,8,2048,32000,2048,8,2,h100-sxm,8,8,1,1,,8,1,8,0,1,none,1,64,"
       "bf16,megatron,iteration_time_s,1.0,")


def test_padded_layer_neither_gathers_nor_reads_back_the_counts():
    fwd, bwd, _ = layer_ops(_ctx(moe_pad_capacity=1.0), True)
    names = [op.name for op in fwd + bwd]
    assert "moe.token_counts" not in names and "moe.dtoh_sync" not in names
    assert not any(op.extra and op.extra.get("host_sync") for op in fwd + bwd)
    dropless = [op.name for op in layer_ops(_ctx(), True)[0]]
    assert "moe.token_counts" in dropless and "moe.dtoh_sync" in dropless


@pytest.mark.parametrize("factor", [1.0, 1.25, 2.0])
def test_padded_experts_run_their_capacity(factor):
    # capacity = ceil(tokens x top_k / experts x c) rows per expert (Megatron-Core get_capacity), sent and computed
    c = _ctx(moe_pad_capacity=factor)
    fwd, _, _ = layer_ops(c, True)
    capacity = math.ceil(4096 * 8 / 128 * factor)
    dispatch = next(op for op in fwd if op.name == "moe.dispatch")
    assert dispatch.comm_bytes == pytest.approx(capacity * 128 * 2048 * 2)
    up = next(op for op in fwd if op.name == "moe.expert.up")
    batch, m, _, _ = up.shape
    assert batch == 16 and m == capacity * 128 // 16


def test_more_capacity_never_faster():
    times = [ct.predict("qwen3-30b-a3b", gpu="h100", num_gpus=8,
                        plan=f"tp=1,pp=1,ep=8,moe_capacity_factor={f},moe_pad_to_capacity=1", micro_batch=1,
                        global_batch=64, seq_len=4096).step_time_s
             for f in (1.0, 1.5, 2.0)]
    assert times == sorted(times)


def test_padding_needs_a_capacity_factor():
    with pytest.raises(PlanError, match="capacity factor"):
        make_plan(tp=1, moe_pad_to_capacity=True)


def test_validate_reads_capacity_and_padding_columns(tmp_path):
    p = tmp_path / "runs.csv"
    p.write_text(HEADER + ROW + ",1.0,1\n" + ROW.replace("moe,", "dropless,", 1) + ",,\n")
    padded, dropless = read_runs(p)
    plan = job_from_row(padded).plan
    assert plan.moe_capacity_factor == 1.0 and plan.moe_pad_to_capacity
    assert job_from_row(dropless).plan.moe_pad_to_capacity is False
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + ROW + ",one,1\n")
    from clustertwin.errors import DataError
    with pytest.raises(DataError, match="moe_capacity_factor"):
        job_from_row(read_runs(bad)[0])
