"""The CLI as a user meets it: commands work, and every mistake is one line on stderr with exit 2."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from clustertwin.cli import main


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, field: str) -> None:
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert field in lines[0], lines[0]
    assert "Traceback" not in err


# ---- commands that work -------------------------------------------------------------------------

def test_predict_default_runs(capsys):
    code, out, err = run(capsys, "predict")
    assert code == 0, err
    assert "step time" in out and "llama3-8b" in out


def test_predict_json_has_documented_keys(capsys):
    code, out, _ = run(capsys, "predict", "--model", "gpt3-175b", "--gpu", "a100-80gb", "--num-gpus", "1024",
                       "--plan", "tp=8,pp=16,dp=8,sp=1,recompute=selective", "--micro-batch", "1",
                       "--global-batch", "1536", "--seq-len", "2048", "--json")
    assert code == 0
    data = json.loads(out)
    for key in ("schema", "step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "hfu", "breakdown_s",
                "memory_per_gpu_bytes", "fits", "inputs"):
        assert key in data
    assert data["schema"] == 1
    assert set(data["memory_per_gpu_bytes"]) >= {"weights", "gradients", "optimizer", "activations", "other", "total"}
    assert abs(sum(data["breakdown_s"].values()) - data["step_time_s"]) < 1e-9 * data["step_time_s"]
    assert data["inputs"]["plan"]["tp"] == 8 and data["inputs"]["cluster"]["num_gpus"] == 1024


def test_describe_and_list(capsys):
    code, out, _ = run(capsys, "describe", "--model", "mixtral-8x7b", "--gpu", "h100", "--num-gpus", "16")
    assert code == 0 and "mixtral" in out.lower()
    code, out, _ = run(capsys, "list", "models", "--json")
    rows = json.loads(out)
    assert code == 0 and len(rows) >= 30
    assert all({"name", "params", "source"} <= set(r) for r in rows)
    for kind in ("gpus", "nodes", "clusters"):
        code, out, _ = run(capsys, "list", kind, "--json")
        assert code == 0 and json.loads(out)


def test_validate_json(capsys, tmp_path):
    csv = tmp_path / "runs.csv"
    csv.write_text(
        "run_id,source,source_url,model,arch,layers,hidden,heads,kv_heads,ffn_hidden,vocab,seq_len,moe_experts,"
        "moe_topk,gpu,num_gpus,gpus_per_node,tp,pp,vpp,dp,cp,ep,sp,zero_stage,recompute,micro_batch,global_batch,"
        "precision,framework,metric,value,notes\n"
        "a,test,,m,llama,8,1024,8,8,4096,32000,2048,,,h100-sxm,8,8,1,1,,8,1,,,1,none,1,64,bf16,megatron,"
        "iteration_time_s,1.0,\n"
        "b,test,,m,llama,8,1024,8,8,4096,32000,2048,,,h100-sxm,8,8,3,1,,8,1,,,1,none,1,64,bf16,megatron,"
        "iteration_time_s,1.0,tp does not divide\n")
    code, out, _ = run(capsys, "validate", str(csv), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["schema"] == 1 and data["n"] == 2
    assert {"n", "mape", "mape_by_metric", "max_abs_error", "rows"} <= set(data)
    failed = [r for r in data["rows"] if r["predicted"] is None]
    assert len(failed) == 1 and failed[0]["run_id"] == "b" and failed[0]["reason"]
    ok = [r for r in data["rows"] if r["predicted"] is not None][0]
    assert ok["error"] == pytest.approx((ok["predicted"] - ok["measured"]) / ok["measured"])


def test_console_script_installed():
    out = subprocess.run([sys.executable, "-m", "clustertwin", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and "clustertwin" in out.stdout


# ---- every bad input: one line naming the field, exit 2 --------------------------------------------

BAD = [
    (["predict", "--model", "llama-9000"], "model"),
    (["predict", "--gpu", "h1000"], "gpu"),
    (["predict", "--cluster", "nowhere-cluster"], "cluster"),
    (["predict", "--model", "missing/file.yaml"], "model"),
    (["predict", "--num-gpus", "0", "--gpu", "h100"], "num_gpus"),
    (["predict", "--num-gpus", "-8", "--gpu", "h100"], "num_gpus"),
    (["predict", "--num-gpus", "12", "--gpu", "h100"], "num_gpus"),
    (["predict", "--gpu", "h100", "--gpus-per-node", "0"], "gpus_per_node"),
    (["predict", "--model", "llama3-8b", "--num-gpus", "8", "--plan", "tp=3"], "plan"),
    (["predict", "--model", "gpt3-175b", "--num-gpus", "64", "--plan", "tp=8,pp=7,dp=1"], "plan"),
    (["predict", "--model", "llama3-8b", "--num-gpus", "64", "--plan", "tp=8,pp=2,dp=2"], "plan"),
    (["predict", "--model", "llama3-8b", "--num-gpus", "64", "--plan", "tp=8,pp=5,dp=1"], "plan"),
    (["predict", "--model", "llama3-8b", "--num-gpus", "64", "--plan", "tp=8,pp=1,dp=8",
      "--global-batch", "12"], "global_batch"),
    (["predict", "--model", "gpt3-175b", "--num-gpus", "64", "--plan", "tp=8,pp=8,vpp=13,dp=1"], "plan.pp"),
    (["predict", "--model", "llama3-8b", "--num-gpus", "64", "--plan", "tp=8,ep=2"], "plan.ep"),
    (["predict", "--plan", "tp=two"], "plan.tp"),
    (["predict", "--plan", "warp=9"], "plan.warp"),
    (["predict", "--plan", "recompute=sometimes"], "plan.recompute"),
    (["predict", "--plan", "zero=7"], "plan.zero_stage"),
    (["predict", "--precision", "fp7"], "plan.precision"),
    (["predict", "--framework", "jax"], "framework"),
    (["predict", "--seq-len", "0"], "seq_len"),
    (["predict", "--bogus-flag"], "--bogus-flag"),
    (["predict", "--num-gpus", "many"], "--num-gpus"),
    (["list", "planets"], "kind"),
    (["validate", "no/such/runs.csv"], "file"),
]


@pytest.mark.parametrize("args,field", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line(capsys, args, field):
    code, _, err = run(capsys, *args)
    assert_one_line_error(code, err, field)


@pytest.mark.parametrize("content,suffix,field", [
    ("num_layers: [1, 2\n", ".yaml", "model"),                    # malformed YAML
    ('{"num_layers": 2,', ".json", "model"),                       # malformed JSON
    ("num_layers: 2\nhidden_size: 64\n", ".yaml", "missing num_heads, ffn_hidden_size"),  # missing fields, all at once
    ("num_layers: 2\nhidden_size: 64\nnum_heads: 4\nffn_hidden_size: 256\nvocab_size: 100\n"
     "max_seq_len: 128\nwarp_drive: 1\n", ".yaml", "model.warp_drive"),  # unknown field
    ("num_layers: -2\nhidden_size: 64\nnum_heads: 4\nffn_hidden_size: 256\nvocab_size: 100\n"
     "max_seq_len: 128\n", ".yaml", "model.num_layers"),             # negative
    ("num_layers: 2\nhidden_size: 64\nnum_heads: 5\nffn_hidden_size: 256\nvocab_size: 100\n"
     "max_seq_len: 128\n", ".yaml", "num_heads"),                   # heads do not divide hidden
    ("- 1\n- 2\n", ".yaml", "model"),                               # not a mapping
])
def test_bad_model_file(capsys, tmp_path, content, suffix, field):
    f = tmp_path / f"m{suffix}"
    f.write_text(content)
    code, _, err = run(capsys, "predict", "--model", str(f))
    assert_one_line_error(code, err, field)


def test_bad_cluster_file(capsys, tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("name: x\nnode: {name: n, gpu: h100, nic_bandwidth_bytes_per_s: -400Gbps}\nnum_nodes: 2\n")
    code, _, err = run(capsys, "predict", "--cluster", str(f))
    assert_one_line_error(code, err, "nic_bandwidth_bytes_per_s")
    f.write_text("name: x\nnode: {name: n, gpu: {name: g, peak_flops: {bf16: 1e30}, hbm_bytes: 80GB, "
                 "hbm_bandwidth_bytes_per_s: 3TB/s, scaleup_bandwidth_bytes_per_s: 450GB/s, tdp_w: 700W}, "
                 "nic_bandwidth_bytes_per_s: 400Gbps}\nnum_nodes: 2\n")
    code, _, err = run(capsys, "predict", "--cluster", str(f))
    assert_one_line_error(code, err, "peak_flops")


def test_unknown_name_suggests_close_ones(capsys):
    code, _, err = run(capsys, "predict", "--model", "lama3-8b")
    assert_one_line_error(code, err, "model")
    assert "llama3-8b" in err


def test_debug_shows_traceback():
    out = subprocess.run([sys.executable, "-m", "clustertwin", "--debug", "predict", "--model", "llama-9000"],
                         capture_output=True, text=True)
    assert out.returncode != 0 and "Traceback" in out.stderr
