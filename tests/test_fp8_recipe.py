"""The FP8 scaling recipe of a plan: Transformer Engine's current scaling (Float8CurrentScalingQuantizer,
quantizer.cpp) runs amax, scale and cast per quantize where delayed scaling, MXFP8 and block scaling run
the one cast kernel."""
from __future__ import annotations

import pytest

from clustertwin.calibrate.profile import profile_for
from clustertwin.catalog import cluster_for_gpu, load_model
from clustertwin.constants import value
from clustertwin.cost.compute import ComputePricer
from clustertwin.errors import ClusterTwinError
from clustertwin.predict import make_training_job, predict_job
from clustertwin.specs.framework import get_framework
from clustertwin.workload.graph import build_graph
from clustertwin.workload.ops import Phase


def _job(recipe: str | None, framework: str = "megatron"):
    plan = "tp=1,pp=1,ep=4,dp=8,zero=1" + (f",fp8_recipe={recipe}" if recipe else "")
    return make_training_job(load_model("qwen1.5-moe-a2.7b"), cluster=cluster_for_gpu("h100-sxm", 8), plan=plan,
                             micro_batch=1, global_batch=16, seq_len=2048, precision="fp8", framework=framework)


def _casts(job) -> dict[str, object]:
    layer = next(b for b in build_graph(job).stages[0].blocks if b.name == "moe_layer")
    return {op.name: op for op in (*layer.fwd, *layer.bwd) if op.name.endswith(".fp8_cast")}


def test_current_scaling_reads_the_input_once_more_in_three_kernels() -> None:
    delayed, current = _casts(_job(None)), _casts(_job("current"))
    assert delayed.keys() == current.keys() and delayed
    k = value("fp8.current_scaling_kernels_per_quantize")
    for name, d in delayed.items():
        c = current[name]
        # delayed: read 16-bit, write two 8-bit copies (4 bytes per element); current: + the amax read (2)
        assert c.bytes == pytest.approx(d.bytes * 6 / 4)
        assert (d.kernels, c.kernels) == (1, k)


@pytest.mark.parametrize("recipe", ["delayed", "mxfp8", "blockwise"])
def test_one_kernel_recipes_price_as_the_default(recipe: str) -> None:
    assert _casts(_job(recipe)) == _casts(_job(None))
    assert predict_job(_job(recipe)).step_time_s == predict_job(_job(None)).step_time_s


def test_host_pays_the_extra_launches_per_quantize_and_per_expert() -> None:
    """By hand: a layer GEMM's quantize is one Python call and two C++ launches more; the routed experts'
    split_quantize launches three kernels per local expert instead of one."""
    job = _job("current")
    fw = get_framework(job.framework)
    pricer = ComputePricer(job.cluster.gpu, profile_for(job.cluster.gpu), fw)
    casts = _casts(job)
    cpp = value("host.cpp_kernel_launch_s")
    dense = casts["attn.qkv.fp8_cast"]
    assert pricer.host_time(dense) == pytest.approx(fw.cpu_dispatch_s + 2 * cpp)
    expert = next(op for name, op in casts.items() if name.startswith("moe.expert.") and op.phase == Phase.FWD)
    experts = expert.extra["experts"]
    assert pricer.host_time(expert) == pytest.approx(
        fw.cpu_dispatch_s + value("moe.expert_quantize_launch_host_s") * experts * 3)


def test_current_scaling_is_never_faster() -> None:
    assert predict_job(_job("current")).step_time_s > predict_job(_job(None)).step_time_s


def test_a_recipe_without_fp8_is_refused() -> None:
    with pytest.raises(ClusterTwinError, match="fp8_recipe"):
        make_training_job(load_model("qwen1.5-moe-a2.7b"), cluster=cluster_for_gpu("h100-sxm", 8),
                          plan="tp=1,ep=4,fp8_recipe=current", micro_batch=1, global_batch=16, seq_len=2048,
                          precision="bf16")
