"""data/validation/nemo_perf_summary_runs.csv (NVIDIA NeMo 24.07's performance summary, FP8 pretraining on
DGX H100): the file is in the validation schema, every row becomes a job with the table's plan, and every row
is predicted. No accuracy is asserted here beyond what the table's own arithmetic fixes."""
from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

from clustertwin.validate.compare import validate_rows
from clustertwin.validate.runs import REQUIRED, job_from_row, read_runs

ROOT = Path(__file__).resolve().parents[1]
NEMO = ROOT / "data" / "validation" / "nemo_perf_summary_runs.csv"
SHARED_HEADER = ["run_id", "source", "source_url", "model", "arch", "layers", "hidden", "heads", "kv_heads",
                 "ffn_hidden", "vocab", "seq_len", "moe_experts", "moe_topk", "gpu", "num_gpus", "gpus_per_node",
                 "tp", "pp", "vpp", "dp", "cp", "ep", "sp", "zero_stage", "recompute", "micro_batch",
                 "global_batch", "precision", "framework", "metric", "value", "notes"]


def test_header_is_the_shared_schema_then_optional_columns():
    with NEMO.open(newline="", encoding="utf-8") as f:
        header = next(csv.reader(f))
    assert header[:len(SHARED_HEADER)] == SHARED_HEADER
    assert set(header[len(SHARED_HEADER):]) <= {"framework_version", "model_preset", "tp_overlap", "attention_kernel",
                                                "exp_avg_dtype", "master_weights"}


def test_every_row_is_filled_and_becomes_its_job():
    rows = read_runs(NEMO)
    assert len(rows) == 12                                   # the page's 12 pretraining lines
    assert len({r.run_id for r in rows}) == len(rows)
    for row in rows:
        r = row.raw
        assert all((r[c] or "").strip() for c in REQUIRED), row.run_id
        assert "/blob/8e3d65dcfe3504689bfc5b6e67d502780aacad41/" in r["source_url"]   # pinned to the commit
        assert row.metric == "tokens_per_s_per_gpu" and row.value > 0
        assert (r["framework"], r["framework_version"], r["precision"]) == ("nemo", "24.07", "fp8")
        job = job_from_row(row)
        tp, pp, cp, dp = (int(r[k]) for k in ("tp", "pp", "cp", "dp"))
        assert tp * pp * cp * dp == int(r["num_gpus"])
        assert (job.plan.tp, job.plan.pp, job.plan.cp, job.plan.dp) == (tp, pp, cp, dp)
        assert job.plan.vpp == int(r["vpp"])
        assert job.framework == "nemo@24.07"
        # the table's global batch is whole micro-batches of every data-parallel rank
        assert int(r["global_batch"]) % (dp * int(r["micro_batch"])) == 0


def test_every_row_is_predicted():
    report = validate_rows(read_runs(NEMO))
    assert not [(r.run_id, r.reason) for r in report.rows if r.predicted is None]


def test_rows_run_flash_attention_2_as_the_launcher_sets_it():
    """NeMo-Framework-Launcher 24.07 exports NVTE_FUSED_ATTN=0 into every job (conf/config.yaml), so Transformer
    Engine 1.8 runs the flash-attn package instead of cuDNN attention: every row says flash2 and is priced with
    it (also the nemo@24.07 stack's default; nemo@24.09 and later default to the FA3 / cuDNN class)."""
    for row in read_runs(NEMO):
        assert row.raw["attention_kernel"] == "flash2"
        assert job_from_row(row).plan.attention_kernel == "flash2"


def test_nemotron_340b_optimizer_state_follows_its_recipe():
    """The 340B recipe's optim.dtype bf16: bf16 Adam moments and no separate master copy (NeMo's store_params False
    when the state dtype equals the model's); with them the published plan fits in 80 GB, as it ran."""
    (row,) = [r for r in read_runs(NEMO) if r.raw["model"] == "Nemotron-340B"]
    plan = job_from_row(row).plan
    assert plan.adam_moments_dtype == "bf16" and plan.master_weights is False
    (result,) = validate_rows([row]).rows
    assert result.fits is not False


def test_nemotron_rows_use_their_presets():
    """Nemotron's squared-ReLU, no-bias, no-dropout layers are not the 'gpt' arch of the columns: the rows name
    catalog presets whose dimensions the columns repeat."""
    for row in read_runs(NEMO):
        if row.raw["model"].startswith("Nemotron"):
            job = job_from_row(row)
            assert job.model.activation == "relu2" and not job.model.bias
            assert job.model.num_layers == int(row.raw["layers"])
            assert job.model.hidden_size == int(row.raw["hidden"])


def test_the_script_parses_the_table_it_cites():
    """The conversion script reads a markdown line the way the page writes it (a link in a cell included)."""
    spec = importlib.util.spec_from_file_location(
        "nemo_conv", ROOT / "data" / "validation" / "scripts" / "nemo_perf_summary_to_schema.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    page = ("### Pretraining\n\n| Model | #-GPUs | GBS | MBS | Sequence Length| TP | PP | CP | VP | "
            "Tokens / sec / GPU | Model TFLOP / sec / GPU | x |\n| - | - | - | - | - | - | - | - | - | - | - | - |\n"
            "| GPT3-175B | 512 | 2048 | 2 | 2048 | 4 | 8 | 1 | 6 | 825 | [888](https://mlcommons.org) | **137** |\n"
            "\n### Finetuning\n")
    (row,) = mod.convert(page)
    assert (row["dp"], row["value"], row["vpp"]) == (16, 825, 6)
    assert row["run_id"] == "nemo24.07-h100-gpt3-175b-fp8-512gpu"
