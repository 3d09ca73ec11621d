"""Each pass's wall on the compute stream (``pass_walls``): the forward's exposed waits are priced
with the forward's ops, the backward's with the backward's, and FSDP prefetch hides behind each."""
from __future__ import annotations

import numpy as np
import pytest

from clustertwin.catalog import cluster_for_gpu, load_model
from clustertwin.schedule.batch import _BLOCKS, _F, BatchPricer, PlanSet, Structure
from clustertwin.schedule.step import StageTime, accumulate_ops, pass_walls
from clustertwin.workload.ops import Phase
from clustertwin.workload.transformer import layer_ops


def test_pass_walls_add_each_pass_its_own_waits() -> None:
    st = StageTime(0, fwd_s=1.0, bwd_s=2.0, recompute_s=0.5, tp_s=0.3, cp_s=0.2, ep_s=0.1, moe_imbalance_s=0.05,
                   waits_fwd_s=0.15)
    fwd, bwd = pass_walls(st)
    assert fwd == pytest.approx(1.15)
    assert bwd == pytest.approx(2.5 + 0.65 - 0.15)
    assert fwd + bwd == pytest.approx(st.per_microbatch_s)


@pytest.mark.parametrize("model,tp,ep", [("llama3-8b", 4, 1), ("mixtral-8x7b", 2, 4)])
def test_block_forward_waits_are_the_forward_ops_alone(model: str, tp: int, ep: int) -> None:
    """The block table's forward fields: what accumulate_ops gives on the layer's forward ops; the
    rest of each total: the backward's."""
    m = load_model(model)
    plans = PlanSet(m, cluster_for_gpu("h100-sxm", 16), 32, 4096, fixed={"moe_dispatcher": "alltoall"})
    pr = BatchPricer(plans)
    ctx_id = pr.context_id(tp, 1, 1, True, ep)
    row = pr.blocks(np.array([pr.block_id(ctx_id, False, "none")]))[0]
    block = _BLOCKS.index("moe_layer" if m.is_moe else "layer")
    c = pr._contexts[ctx_id]
    pricer = pr._pricer(tp, 1, ep, False)
    f, b, _core = layer_ops(c, m.is_moe)
    fwd, bwd = StageTime(0), StageTime(0)
    accumulate_ops(fwd, [(op, 1) for op in f], Phase.FWD, pricer)
    accumulate_ops(bwd, [(op, 1) for op in b], Phase.BWD, pricer)
    for total, part, name in (("tp_s", "tp_fwd", "tp_s"), ("ep_s", "ep_fwd", "ep_s"),
                              ("moe_imb", "moe_imb_fwd", "moe_imbalance_s")):
        assert row[block, _F[part]] == pytest.approx(getattr(fwd, name), rel=1e-12, abs=1e-18)
        assert row[block, _F[total]] - row[block, _F[part]] == pytest.approx(getattr(bwd, name), rel=1e-9, abs=1e-15)
    assert row[block, _F["tp_fwd"]] > 0
    if m.is_moe:
        assert row[block, _F["ep_fwd"]] > 0


def test_stage_forward_waits_lie_within_the_stage_waits() -> None:
    from clustertwin import predict
    r = predict("mixtral-8x7b", gpu="h100-sxm", num_gpus=32, plan="tp=2,ep=4,cp=2,zero=3", micro_batch=1,
                global_batch=32, seq_len=8192)
    for st in r.step.stages:
        waits = st.tp_s + st.cp_s + st.ep_s + st.moe_imbalance_s
        assert 0 < st.waits_fwd_s < waits
