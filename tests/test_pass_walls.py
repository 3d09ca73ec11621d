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


def test_fsdp_root_unit_is_each_pass_first_unit() -> None:
    """11 units, the root (embedding and head) half of the gathers and reduce-scatters, ample compute:
    the root's gather opens the forward; the backward does not re-gather it (FSDP2 keeps the root
    unsharded after the forward), and its reduce-scatter stays exposed there; the other 10 units'
    collectives hide and slow the compute by OVERLAP_SLOWDOWN per second hidden."""
    from clustertwin.schedule.step import OVERLAP_SLOWDOWN as d
    from clustertwin.schedule.step import exposed_fsdp
    exposed = 0.5 + 0.25
    total = 2 * 1.0 - 0.5 + 0.5          # each layer unit gathered twice, the root once; one reduce-scatter
    assert exposed_fsdp(1.0, 0.5, 11, 10.0, 20.0, True, root_gather=0.5, root_reduce=0.25) == pytest.approx(
        exposed + d * (total - exposed))
    # without overlap every collective is exposed: the root's gather once
    assert exposed_fsdp(1.0, 0.5, 11, 10.0, 20.0, False, root_gather=0.5, root_reduce=0.25) == pytest.approx(total)
    # a root the size of every other unit: the formula of equal units, less the backward's root gather
    a0 = 0.1
    assert exposed_fsdp(1.0, 0.5, 10, 10.0, 20.0, True, root_gather=a0, root_reduce=0.05) == pytest.approx(
        exposed_fsdp(1.0, 0.5, 10, 10.0, 20.0, True) - a0)
    # compute shorter than the collectives: each layer unit exposes what its own collectives outlast it by
    a, r, cf, cb = 0.05, 0.025, 0.5 / 11, 1.0 / 11
    exposed = 0.5 + 10 * (a - cf) + 0.25 + 10 * (a + r - cb) * (a + r > cb)
    assert exposed_fsdp(1.0, 0.5, 11, 0.5, 1.0, True, root_gather=0.5, root_reduce=0.25) == pytest.approx(
        exposed + d * (total - exposed))


def test_fsdp_root_unit_priced_apart(monkeypatch) -> None:
    """Llama 3 8B under torchtitan's FSDP: the root unit holds 2 x 128256 x 4096 parameters against
    218M per layer, so pricing it apart exposes more than one 33rd of the gathers at each pass's start."""
    from clustertwin import predict
    from clustertwin.schedule import batch
    seen = []
    real = batch.exposed_fsdp

    def spy(*args, **kw):
        seen.append(args)
        return real(*args, **kw)

    monkeypatch.setattr(batch, "exposed_fsdp", spy)
    predict("llama3-8b", gpu="h100-sxm", num_gpus=16, plan="tp=2,dp=8,zero=3", framework="torchtitan",
            micro_batch=2, global_batch=32, seq_len=2048)
    gather, reduce, units, *_rest = seen[-1][:6]
    root_gather, root_reduce = seen[-1][8:10]
    assert units == 33
    share = 2 * 128256 * 4096 / 8.03e9
    assert root_gather / gather == pytest.approx(share, rel=0.05)
    assert root_reduce / reduce == pytest.approx(share, rel=0.05)


def test_faster_nvlink_never_slower_with_cp_on_the_fsdp_link() -> None:
    """Found by hypothesis once each pass had its own wall: faster NVLink exposes less TP traffic and
    moves CP ring time from waited-for to hidden behind attention; while the ring holds the NICs the
    FSDP traffic shares, that time hides no FSDP collective whether it is waited for or hidden, so
    the prefetch window shrinks only by what the pass saves (before: 67.85 ms -> 68.51 ms)."""
    from clustertwin import predict
    from clustertwin.specs.model import ModelSpec
    from clustertwin.specs.plan import Plan
    model = ModelSpec(name="small-gpt", num_layers=8, hidden_size=2048, num_heads=16, ffn_hidden_size=8192,
                      vocab_size=50304, max_seq_len=2048, tied_embeddings=True, dropout=0.1)
    cluster = cluster_for_gpu("h100-sxm", 32)
    node = cluster.node.model_copy(update={"scaleup_bandwidth_bytes_per_s": 4 * cluster.node.gpu_scaleup_bandwidth})
    fast_cluster = cluster.model_copy(update={"node": node})
    for kernel in ("flash", "unfused"):
        plan = Plan(tp=8, cp=2, sp=True, zero_stage=3, micro_batch=2, global_batch=16, recompute="none",
                    attention_kernel=kernel, precision="fp8")
        base = predict(model, cluster=cluster, plan=plan, seq_len=2048, framework="torchtitan").step_time_s
        fast = predict(model, cluster=fast_cluster, plan=plan, seq_len=2048, framework="torchtitan").step_time_s
        assert fast <= base * (1 + 1e-12)
