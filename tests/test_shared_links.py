"""Concurrent streams of one rank share a link only where they run on the same one (issue 16, item 5):
the CP ring takes time from the DP/FSDP traffic it overlaps when both cross nodes (NICs) or neither
does (NVLink); overlapped pipeline sends crossing nodes take the NIC share of FSDP's per-micro-batch
gathers and reduce-scatters, as they already did of the DP reduction."""
from __future__ import annotations

import clustertwin as ct


def _crit(plan: str, **kw):
    r = ct.predict("llama3-8b", gpu="h100-sxm", num_gpus=64, plan=plan, seq_len=16384, global_batch=64, **kw)
    return r, r.step.stages[r.step.critical_stage]


def test_cp_ring_on_nvlink_leaves_the_nic_to_dp() -> None:
    # tp=1, cp=2: the CP pair sits in one node (NVLink) and the DP group of 32 spans nodes
    _, st = _crit("tp=1,cp=2,dp=32,zero=1")
    assert st.cp_hidden_fwd_s == 0.0 and st.cp_hidden_bwd_s == 0.0
    # tp=8, cp=2: the CP ring (stride 8) crosses nodes, as the DP group does: they share the NICs
    _, st = _crit("tp=8,cp=2,dp=4,sp=1,zero=1")
    assert st.cp_hidden_fwd_s > 0.0 and st.cp_hidden_bwd_s > 0.0


def test_overlapped_pipeline_sends_slow_fsdp_that_shares_their_nics() -> None:
    # Llama 3 70B, tp=8: the DP group (stride 8) and the pipeline pairs (stride 32) both cross nodes,
    # and FSDP's gathers outlast a layer's compute: overlapped sends add their NIC time to it
    def crit(overlap_pp: int):
        r = ct.predict("llama3-70b", gpu="h100-sxm", num_gpus=64, seq_len=2048, global_batch=64,
                       plan=f"tp=8,pp=2,dp=4,sp=1,zero=3,overlap_pp_comm={overlap_pp},overlap_param_gather=1")
        return r.step.stages[r.step.critical_stage]

    on, off = crit(1), crit(0)
    assert bool(on.pp_shares_nic) and on.pp_s > 0
    assert on.fsdp_s > off.fsdp_s
