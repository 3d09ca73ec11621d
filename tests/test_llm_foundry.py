"""MosaicML llm-foundry's MPT benchmark tables (data/validation/llm_foundry_runs.csv) and the stack they ran
(llm-foundry-triton / llm-foundry-flash, specs/framework.py): the file is in the validation schema, every
row becomes the job its cells say and predicts; the Triton FlashAttention's cost is hand-checkable. No
accuracy is asserted here."""
from __future__ import annotations

import csv
import functools
import re
from pathlib import Path

import numpy as np
import pytest

from clustertwin.catalog import cluster_for_gpu
from clustertwin.constants import value
from clustertwin.errors import ClusterTwinError
from clustertwin.specs import make_plan
from clustertwin.specs.framework import FRAMEWORK_PROFILES, get_framework, resolve_stack
from clustertwin.validate import runs
from clustertwin.validate.compare import validate_rows
from clustertwin.validate.runs import REQUIRED, job_from_row, model_from_row, read_runs
from clustertwin.workload.graph import layer_context
from clustertwin.workload.ops import OpKind
from clustertwin.workload.transformer import layer_ops

FILE = Path(__file__).resolve().parents[1] / "data" / "validation" / "llm_foundry_runs.csv"
SHARED_HEADER = ["run_id", "source", "source_url", "model", "arch", "layers", "hidden", "heads", "kv_heads",
                 "ffn_hidden", "vocab", "seq_len", "moe_experts", "moe_topk", "gpu", "num_gpus", "gpus_per_node",
                 "tp", "pp", "vpp", "dp", "cp", "ep", "sp", "zero_stage", "recompute", "micro_batch",
                 "global_batch", "precision", "framework", "metric", "value", "notes"]
OPTIONAL = {"model_preset", "framework_version", "compile", "attention_kernel", "attention_impl",
            "grad_reduce_dtype", "tied_embeddings", "dropout"}


@pytest.fixture(scope="module")
def rows():
    return read_runs(FILE)


def test_header_is_the_shared_schema_then_optional_columns():
    with FILE.open(newline="", encoding="utf-8") as f:
        header = next(csv.reader(f))
    assert header[:len(SHARED_HEADER)] == SHARED_HEADER
    assert set(header[len(SHARED_HEADER):]) <= OPTIONAL


def test_every_row_is_filled_pinned_and_becomes_its_job(rows, monkeypatch):
    monkeypatch.setattr(runs, "cluster_for_gpu", functools.lru_cache(maxsize=None)(runs.cluster_for_gpu))
    assert len(rows) == 216                                   # every row of the README's five tables
    assert len({r.run_id for r in rows}) == len(rows)
    for row in rows:
        r = row.raw
        assert all((r[c] or "").strip() for c in REQUIRED), row.run_id
        assert re.search(r"/blob/[0-9a-f]{40}/", r["source_url"]), row.run_id   # pinned to a commit
        assert row.metric == "tokens_per_s_per_gpu" and row.value > 0
        job = job_from_row(row)
        p = job.plan
        assert (p.tp, p.pp, p.cp, p.dp) == (1, 1, 1, int(r["num_gpus"]))      # FSDP only
        assert p.zero_stage in (2, 3) and p.recompute in ("none", "full")
        assert (p.micro_batch, p.global_batch) == (int(r["micro_batch"]), int(r["global_batch"]))
        want = "llm-foundry-flash" if r["attention_impl"] == "flash-attn" else "llm-foundry-triton"
        assert job.framework == want, row.run_id


def test_the_model_is_mpt_as_the_benchmarks_built_it(rows):
    """MPT with biases, learned positions and the output head tied to the embedding: the parameter count of
    every row equals the NumParams the table publishes (quoted in the row's notes), and dropout is off."""
    for row in rows:
        m = model_from_row(row.raw)
        assert m.tied_embeddings and m.bias and m.positions == "learned" and m.dropout == 0.0
        published = int(re.search(r"N = NumParams (\d+)", row.raw["notes"]).group(1))
        assert m.params_total == published, row.run_id


def test_every_row_predicts(rows):
    rep = validate_rows(rows)
    assert len(rep.rows) == len(rows)
    assert all(r.error is not None and np.isfinite(r.predicted) and r.predicted > 0 for r in rep.rows)


def test_tied_embeddings_column_drops_one_vocab_by_hidden_matrix():
    base = {"run_id": "x", "arch": "gpt", "layers": "2", "hidden": "256", "heads": "4", "vocab": "1024",
            "seq_len": "128"}
    untied, tied = model_from_row(dict(base)), model_from_row(dict(base, tied_embeddings="1"))
    assert untied.params_total - tied.params_total == 1024 * 256
    assert model_from_row(dict(base, dropout="0")).dropout == 0.0
    with pytest.raises(ClusterTwinError, match="dropout"):
        model_from_row(dict(base, dropout="none"))


def test_attention_impl_picks_the_profile_and_is_refused_elsewhere():
    assert resolve_stack("llm-foundry", "2023-10", None, "triton")[0] == "llm-foundry-triton"
    assert resolve_stack("llm-foundry", "2024-01", None, "flash-attn")[0] == "llm-foundry-flash"
    name, how = resolve_stack("llm-foundry")
    assert name == "llm-foundry-triton" and "triton" in how      # the default, stated
    assert resolve_stack("llm-foundry", "2023-10", None, "triton")[1] == ""   # the documented release
    assert "not modelled apart" in resolve_stack("llm-foundry", "2023-04", None, "triton")[1]
    notes: list[str] = []
    with pytest.raises(ClusterTwinError, match="attention_impl"):
        runs.stack_of_row({"framework": "megatron", "attention_impl": "triton"}, notes)
    with pytest.raises(ClusterTwinError, match="attention_impl"):
        runs.stack_of_row({"framework": "llm-foundry-flash", "attention_impl": "triton"}, notes)


def test_the_two_llm_foundry_profiles_differ_only_in_the_attention_build():
    a, b = FRAMEWORK_PROFILES["llm-foundry-triton"], FRAMEWORK_PROFILES["llm-foundry-flash"]
    differ = [k for k in a.__dataclass_fields__ if k != "name" and getattr(a, k) != getattr(b, k)]
    assert differ == ["attention_triton"] and a.attention_triton
    # what llm-foundry runs: F.layer_norm in 16 bits (one kernel), flash-attn's fused cross-entropy, the GELU
    # and residual adds eager, FSDP (ZeRO-3) by default with fp32 sharded weights under autocast
    assert a.fused_norm and a.fused_cross_entropy and not a.fused_bias_act and not a.fused_residual
    assert a.default_zero_stage == 3 and not a.master_in_optimizer and a.attention_kernel == "flash2"


def _attention_ops(gpu: str, framework: str):
    from clustertwin.catalog import load_model
    model = load_model("gpt3-1.3b")
    plan = make_plan(tp=1, pp=1, dp=8, cp=1, zero_stage=3, micro_batch=1, recompute="none",
                     attention_kernel="flash2")
    c = layer_context(model, plan, 16384, get_framework(framework))
    fwd, bwd, _ = layer_ops(c, False)
    return ([op for op in fwd if op.kind == OpKind.ATTENTION][0], [op for op in bwd if op.kind == OpKind.ATTENTION][0])


@pytest.mark.parametrize("gpu", ["a100-80gb", "h100-sxm"])
def test_triton_flash_attention_runs_at_half_flash_attention_2s_speed(gpu):
    """The Triton port of FlashAttention-1 (llm-foundry attn_impl 'triton') at the FA1/FA2 speed ratio of the
    FlashAttention-2 paper (constants attention.triton_flash1_factor = 1/2): forward and backward take the FA2
    time over the factor on every architecture (Ampere's attention figures are FA2's; Hopper's FA2 figures),
    and the array pricer agrees."""
    from clustertwin.cost.compute import ComputePricer
    from clustertwin.cost.profile import default_profile
    g = cluster_for_gpu(gpu, 8).gpu
    factor = value("attention.triton_flash1_factor")
    assert factor == 0.5
    triton = ComputePricer(g, default_profile(g), get_framework("llm-foundry-triton"))
    flash = ComputePricer(g, default_profile(g), get_framework("llm-foundry-flash"))
    for op in _attention_ops(gpu, "llm-foundry-triton"):
        assert op.name.startswith("attn.flash2")
        gap = triton.fw.kernel_gap_s * op.kernels
        assert triton.time(op) - gap == pytest.approx((flash.time(op) - gap) / factor, rel=1e-9)
        assert float(np.asarray(triton.times(op))) == pytest.approx(triton.time(op), rel=1e-9)


def test_validation_table_write_appends_the_llm_foundry_section_to_the_validation_document(tmp_path):
    """The lead's regeneration (validation_table.py --write docs/validation.md) adds this file's section to the
    document holding the cross-validation table, once; a later run rewrites it in place."""
    import importlib.util
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("validation_table", root / "benchmarks" / "validation_table.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    doc = tmp_path / "v.md"
    doc.write_text("# V\n\n<!-- cv-table:begin (python benchmarks/cv_table.py --write) -->\n<!-- cv-table:end -->\n",
                   encoding="utf-8")
    assert mod.run(["--write", str(doc)]) == 0
    once = doc.read_text(encoding="utf-8")
    assert once.count("(data/validation/llm_foundry_runs.csv)") == 1
    assert "\nrows 216, predicted 216, failed 0;" in once
    assert mod.run(["--write", str(doc)]) == 0
    assert doc.read_text(encoding="utf-8") == once
