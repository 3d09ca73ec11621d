"""validate: rows become jobs with stated assumptions, and the accuracy on published runs does not
regress (figures in docs/validation.md)."""
from __future__ import annotations

from pathlib import Path

from clustertwin.validate.compare import validate_rows
from clustertwin.validate.runs import job_from_row, read_runs

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_RUNS = ROOT / "data" / "validation" / "public_runs.csv"
MOE_RUNS = ROOT / "data" / "validation" / "moe_public_runs.csv"
DENSE_RUNS = ROOT / "data" / "validation" / "dense_public_runs.csv"
TORCHTITAN_RUNS = ROOT / "data" / "validation" / "torchtitan_runs.csv"

HEADER = ("run_id,source,source_url,model,arch,layers,hidden,heads,kv_heads,ffn_hidden,vocab,seq_len,moe_experts,"
          "moe_topk,gpu,num_gpus,gpus_per_node,tp,pp,vpp,dp,cp,ep,sp,zero_stage,recompute,micro_batch,global_batch,"
          "precision,framework,metric,value,notes\n")


def _rows(tmp_path, *lines: str):
    p = tmp_path / "runs.csv"
    p.write_text(HEADER + "".join(line + "\n" for line in lines))
    return read_runs(p)


def test_unset_etp_that_cannot_fold_is_assumed_one(tmp_path):
    # tp*cp*dp = 2*1*2 = 4 ranks hold the experts: ep=4 with Megatron's default etp=tp=2 would need 8
    row, = _rows(tmp_path, "moe,t,,m,mixtral,4,1024,8,8,2048,32000,2048,8,2,h100-sxm,8,8,2,2,,2,1,4,1,1,none,1,64,"
                           "bf16,megatron,iteration_time_s,1.0,")
    job = job_from_row(row)
    assert job.plan.etp == 1
    assert any(a.startswith("etp unknown: assumed 1") for a in row.assumptions)


def test_unset_etp_that_folds_keeps_the_megatron_default(tmp_path):
    row, = _rows(tmp_path, "moe,t,,m,mixtral,4,1024,8,8,2048,32000,2048,8,2,h100-sxm,8,8,2,2,,2,1,2,1,1,none,1,64,"
                           "bf16,megatron,iteration_time_s,1.0,")
    assert job_from_row(row).plan.etp is None
    assert not any(a.startswith("etp") for a in row.assumptions)


def test_every_published_moe_row_is_predicted():
    report = validate_rows(read_runs(MOE_RUNS))
    failed = [(r.run_id, r.reason) for r in report.rows if r.predicted is None]
    assert not failed


def test_llama3_table4_8k_rows_within_the_issue_bound():
    report = validate_rows(read_runs(DENSE_RUNS))
    errors = {r.run_id: abs(r.error) for r in report.rows}
    assert errors and all(e < 0.30 for e in errors.values())  # 16K-GPU row: mb/vpp unpublished (-24.5%)
    assert sum(errors.values()) / len(errors) < 0.12


def test_public_runs_accuracy_does_not_regress():
    report = validate_rows(read_runs(PUBLIC_RUNS))
    errors = [abs(r.error) for r in report.rows if r.predicted is not None]
    assert len(errors) == len(report.rows)          # every row predicted
    assert sum(errors) / len(errors) <= 0.08        # the issue's MAPE bound
    assert sum(e <= 0.20 for e in errors) >= len(errors) - 3   # the three Megatron README rows of docs/validation.md


def test_torchtitan_runs_time_and_memory_do_not_regress():
    """torchtitan's published runs (docs/validation.md): the first measured memory rows."""
    report = validate_rows(read_runs(TORCHTITAN_RUNS))
    assert not report.failed_rows
    assert report.mape_by_metric["peak_memory_bytes"] <= 0.20
    assert report.mape_by_metric["tokens_per_s_per_gpu"] <= 0.30


def test_etp_inference_derives_an_empty_dp(tmp_path):
    # dp left empty: 16 GPUs / (tp 2 * pp 2) = 4 -> tp*cp*dp = 8 ranks; ep=8 with etp=tp=2 would need 16
    row, = _rows(tmp_path, "moe,t,,m,mixtral,4,1024,8,8,2048,32000,2048,8,2,h100-sxm,16,8,2,2,,,1,8,1,1,none,1,64,"
                           "bf16,megatron,iteration_time_s,1.0,")
    assert job_from_row(row).plan.etp == 1
