"""A user's first hour (issue 17): every input is answered right or refused in one line.

Each mistake below is one a new user makes (CLI flags, plan strings, model/cluster/GPU files, CSVs,
sweep specs). Each must end as one line on stderr, ``error: <field>: <problem>; <fix>``, exit code 2,
no traceback, and never a silently wrong number. The rest checks the defaults and words a user sees:
the default global batch, goodput's memory check, what search ranks by, the sweep's time-to-train
columns, and the cluster-file schema of docs/clusters.md.
"""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from clustertwin.cli import main

ROOT = Path(__file__).resolve().parents[1]


def run(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def refused(code: int, err: str, *words: str) -> str:
    """The one-line refusal: exit 2, one line starting 'error: ', naming each of ``words``."""
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert code == 2, (code, err)
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("error: "), line
    assert re.match(r"error: [^:;]+: .+", line), line         # error: <field>: <problem>...
    for w in words:
        assert w in line, (w, line)
    return line


# ---- files the mistakes are made in --------------------------------------------------------------------
H100_GPU = ("name: my-gpu\npeak_flops: {bf16: 989TFLOPS}\nhbm_bytes: 80GB\nhbm_bandwidth_bytes_per_s: 3.35TB/s\n"
            "scaleup_bandwidth_bytes_per_s: 450GB/s\ntdp_w: 700W\n")
CLUSTER = "name: c\nnode: {name: n, gpu: h100, nic_bandwidth_bytes_per_s: %s}\nnum_nodes: 2\n"

FILE_MISTAKES = [
    # (what the user wrote, file suffix, flag it is given to, words the one line must hold)
    ("nic 400 without a unit (read as 400 B/s: a 401-day step)", CLUSTER % "400", "--cluster",
     ["cluster.node.nic_bandwidth_bytes_per_s", "no unit", "400Gbps"]),
    ("nic 400 Mb/s (no NIC is that slow)", CLUSTER % "400Mbps", "--cluster",
     ["nic_bandwidth_bytes_per_s", "implausible", "1 Gb/s"]),
    ("nic given as a bare string", CLUSTER % '"50000000000"', "--cluster", ["nic_bandwidth_bytes_per_s", "no unit"]),
    ("latency 6 (meant microseconds)", CLUSTER % "400Gbps" + "inter_node_latency_s: 6\n", "--cluster",
     ["inter_node_latency_s", "implausible", "5us"]),
    ("latency 50 ms", CLUSTER % "400Gbps" + "intra_node_latency_s: 50ms\n", "--cluster",
     ["intra_node_latency_s", "1 ms"]),
    ("cluster missing its node and size", "name: c\n", "--cluster", ["cluster: missing node, num_nodes"]),
    ("cluster with a misspelt field and a bare bandwidth: both at once",
     "name: c\nnode: {name: n, gpu: h100, nic_bandwidth_bytes_per_s: 400}\nnum_node: 2\n", "--cluster",
     ["cluster:", "num_node: unknown field", "did you mean num_nodes", "nic_bandwidth_bytes_per_s: 400 has no unit",
      "missing num_nodes"]),
    ("unknown topology", CLUSTER % "400Gbps" + "topology: dragonfly\n", "--cluster", ["cluster.topology"]),
    ("unknown GPU inside a cluster file", "name: c\nnode: {name: n, gpu: h1000, nic_bandwidth_bytes_per_s: 400Gbps}\n"
     "num_nodes: 2\n", "--cluster", ["cluster.node.gpu", "h1000"]),
    ("GPU memory without a unit", H100_GPU.replace("80GB", "80"), "--gpu", ["gpu.hbm_bytes", "no unit", "80GB"]),
    ("GPU memory in MB", H100_GPU.replace("80GB", "80MB"), "--gpu", ["hbm_bytes", "implausible"]),
    ("HBM bandwidth in GB/s typed as Gb/s-sized number", H100_GPU.replace("3.35TB/s", "3.35GB/s"), "--gpu",
     ["hbm_bandwidth_bytes_per_s", "implausible"]),
    ("peak FLOP/s as a bare 989", H100_GPU.replace("989TFLOPS", "989"), "--gpu",
     ["peak_flops.bf16", "implausible", "989TFLOPS"]),
    ("a GPU with only an FP8 peak", H100_GPU.replace("bf16: 989TFLOPS", "fp8: 1979TFLOPS"), "--gpu",
     ["peak_flops", "bf16 or fp16"]),
    ("a GPU with an unknown dtype", H100_GPU.replace("bf16: 989TFLOPS", "bf16: 989TFLOPS, int4: 4PFLOPS"), "--gpu",
     ["peak_flops.int4", "unknown dtype"]),
    ("a model file missing fields: all named at once", "num_layers: 2\nhidden_size: 64\n", "--model",
     ["model: missing", "num_heads", "ffn_hidden_size", "vocab_size"]),
    ("a model file with a misspelt field", "num_layers: 2\nhidden_size: 64\nnum_heads: 4\nffn_hidden_size: 256\n"
     "vocab_size: 100\nmax_seq_len: 128\nnum_head: 4\n", "--model", ["num_head", "unknown field", "num_heads"]),
    ("a model file that is not YAML", "num_layers: [1, 2\n", "--model", ["model", "malformed YAML"]),
]


@pytest.mark.parametrize("what,content,flag,words", FILE_MISTAKES, ids=[m[0] for m in FILE_MISTAKES])
def test_file_mistakes_are_one_line(capsys, tmp_path, what, content, flag, words) -> None:
    f = tmp_path / "spec.yaml"
    f.write_text(content)
    code, out, err = run(capsys, "predict", flag, str(f))
    refused(code, err, *words)
    assert out == ""


CLI_MISTAKES = [
    # (argv, words): flags and plan strings
    (["predict", "--gpu", "a100-80gb", "--precision", "fp8"], ["plan.precision", "a100-80gb has no FP8", "bf16"]),
    (["predict", "--gpu", "a100-80gb", "--plan", "tp=2,precision=fp8"], ["plan.precision", "FP8"]),
    (["predict", "--gpu", "a100-80gb", "--cluster", "eos"], ["gpu", "conflicts with cluster eos", "h100-sxm"]),
    (["predict", "--gpu", "h1000"], ["gpu", "unknown gpu"]),
    (["predict", "--model", "llama3-8bb"], ["model", "did you mean", "llama3-8b"]),
    (["predict", "--num-gpus", "12"], ["num_gpus", "multiple of 8"]),
    (["predict", "--framework", "megatorn"], ["framework"]),
    (["predict", "--seq-len", "0"], ["seq_len"]),
    (["predict", "--micro-batch", "0"], ["micro_batch"]),
    (["predict", "--plan", "tp=2,dp=32", "--global-batch", "100"], ["plan.global_batch", "dp*micro_batch"]),
    (["predict", "--plan", "tp=8 pp=2"], ["plan", "separated by commas", '"tp=8,pp=2"']),
    (["predict", "--num-gpus", "48", "--plan", "tp=3"], ["plan.tp", "heads"]),
    (["predict", "--plan", "tp=3"], ["plan", "does not divide 64 GPUs"]),
    (["predict", "--plan", "tpp=2"], ["plan.tpp", "unknown plan field"]),
    (["predict", "--plan", "tp=2,pp=1,dp=16"], ["plan", "64 GPUs"]),
    (["predict", "--plan", "tp=2,vpp=2"], ["plan.vpp", "pp > 1"]),
    (["predict", "--plan", "tp=2,ep=8"], ["plan.ep", "no experts"]),
    (["predict", "--plan", "tp=2,recompute=some"], ["plan.recompute"]),
    (["search", "--fix", "tp=8 pp=2"], ["fix", "separated by commas", '"tp=8,pp=2"']),
    (["search", "--fix", "gb=512"], ["fix.global_batch", "--global-batch"]),
    (["search", "--gpu", "a100-80gb", "--precision", "fp8"], ["plan.precision", "FP8"]),
    (["search", "--objective", "goodput"], ["tokens", "--tokens"]),
    (["search", "--objective", "cost"], ["gpu_hour_price"]),
    (["search", "--tokens", "lots"], ["tokens"]),
    (["search", "--max-memory-fraction", "1.5"], ["max_memory_fraction"]),
    (["goodput", "--tokens", "1T", "--plan", "tp=1,dp=64,zero=0"], ["plan", "does not fit", "GiB of 80 GiB"]),
    (["goodput", "--tokens", "1T", "--checkpoint-mode", "fast"], ["checkpoint_mode"]),
    (["goodput", "--tokens", "1T", "--storage-bandwidth", "1.4"], ["storage-bandwidth", "no unit", "2TB/s"]),
    (["goodput", "--tokens", "1T", "--node-storage-bandwidth", "50"], ["node-storage-bandwidth", "no unit"]),
    (["validate", "no/such/runs.csv"], ["file", "not found"]),
]


@pytest.mark.parametrize("argv,words", CLI_MISTAKES, ids=[" ".join(a) for a, _ in CLI_MISTAKES])
def test_cli_mistakes_are_one_line(capsys, argv, words) -> None:
    code, out, err = run(capsys, *argv)
    refused(code, err, *words)


def test_a_csv_without_the_schema_is_one_line(capsys, tmp_path) -> None:
    f = tmp_path / "runs.csv"
    f.write_text("run,time\na,1.0\n")
    code, _, err = run(capsys, "validate", str(f))
    refused(code, err, "file", "run_id")


def test_validation_table_script_with_a_missing_file_is_one_line(capsys) -> None:
    spec = importlib.util.spec_from_file_location("validation_table", ROOT / "benchmarks" / "validation_table.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    code = mod.run(["no/such/runs.csv"])
    refused(code, capsys.readouterr().err, "file", "not found")
    code = mod.run(["--write", "no/such/doc.md"])
    refused(code, capsys.readouterr().err, "--write", "not found")
    code = mod.run(["--write"])
    refused(code, capsys.readouterr().err, "--write", "needs the document")


# ---- sweep specs: checked before the first cell --------------------------------------------------------
SWEEP = "models: [{model}]\nclusters: [{{gpu: {gpu}, num_gpus: 8}}]\nglobal_batch: 32\nseq_len: 1024\n{extra}"
SWEEP_MISTAKES = [
    (SWEEP.format(model="gpt3-125m, gpt3-125mm", gpu="a100-80gb", extra=""),
     ["spec.model", "gpt3-125mm", "did you mean gpt3-125m"]),
    (SWEEP.format(model="gpt3-125m", gpu="a100-80gb", extra="precision: fp8\n"), ["spec.plan.precision", "FP8"]),
    (SWEEP.format(model="gpt3-125m", gpu="h1000", extra=""), ["spec.gpu", "h1000"]),
    (SWEEP.format(model="gpt3-125m", gpu="a100-80gb", extra="fix: tp=3\n"), ["spec.fix", "no split"]),
    (SWEEP.format(model="gpt3-125m", gpu="a100-80gb", extra="objectives: [goodput]\n"), ["spec.tokens"]),
    ("models: [gpt3-125m]\nclusters: [{gpu: a100-80gb}]\nglobal_batch: 8\n", ["clusters.num_gpus"]),
]


@pytest.mark.parametrize("text,words", SWEEP_MISTAKES, ids=[w[0] for _, w in SWEEP_MISTAKES])
def test_sweep_spec_mistakes_stop_before_the_first_cell(capsys, tmp_path, text, words) -> None:
    pytest.importorskip("pyarrow")
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    out = tmp_path / "out"
    code, stdout, err = run(capsys, "sweep", str(spec), "-o", str(out), "-q")
    refused(code, err, *words)
    assert not out.exists()          # nothing computed, nothing written


def test_sweep_without_pyarrow_stops_before_the_first_cell(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)          # import pyarrow -> ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    spec = tmp_path / "spec.yaml"
    spec.write_text(SWEEP.format(model="gpt3-125m", gpu="a100-80gb", extra=""))
    out = tmp_path / "out"
    code, _, err = run(capsys, "sweep", str(spec), "-o", str(out), "-q")
    refused(code, err, "output", "pyarrow", "pip install")
    assert not out.exists()


def test_there_are_at_least_thirty_distinct_mistakes() -> None:
    n = len(FILE_MISTAKES) + len(CLI_MISTAKES) + len(SWEEP_MISTAKES) + 3   # + CSV, script, no pyarrow
    assert n >= 30
    assert len({m[0] for m in FILE_MISTAKES}) == len(FILE_MISTAKES)
    assert len({tuple(a) for a, _ in CLI_MISTAKES}) == len(CLI_MISTAKES)


# ---- answered right: what used to be silently wrong ---------------------------------------------------
def test_gpu_beside_a_cluster_is_accepted_when_it_is_the_clusters(capsys) -> None:
    code, out, err = run(capsys, "predict", "--gpu", "h100", "--cluster", "eos", "--json")
    assert code == 0, err
    assert json.loads(out)["inputs"]["cluster"]["gpu"] == "h100-sxm"


def test_every_catalog_preset_carries_its_units_and_loads() -> None:
    """The catalog's files are read as a user's are: units on every bandwidth and size."""
    from clustertwin.catalog import list_presets
    for kind in ("gpus", "nodes", "clusters"):
        assert list_presets(kind)


def test_the_default_global_batch_is_a_fixed_number_of_tokens(capsys) -> None:
    """Three plans compared side by side train the same batch (it was dp x micro-batch x 2pp)."""
    batches = set()
    for plan in ("tp=1,dp=64", "tp=2,pp=2", "tp=8,pp=4,vpp=2"):
        code, out, err = run(capsys, "predict", "--model", "llama3-70b", "--plan", plan, "--seq-len", "8192", "--json")
        assert code == 0, err
        d = json.loads(out)
        assert d["inputs"]["global_batch_source"] == "default"
        batches.add(d["inputs"]["plan"]["global_batch"])
    assert batches == {256}                          # 2,097,152 tokens / 8,192
    code, out, _ = run(capsys, "predict", "--model", "gpt3-1.3b", "--gpu", "a100-80gb", "-n", "16", "--json")
    assert json.loads(out)["inputs"]["plan"]["global_batch"] * 2048 == 2**21
    code, out, _ = run(capsys, "predict")            # the README's default job is unchanged, and says so
    assert code == 0 and "global batch 256 (default: 2M tokens)" in " ".join(out.split())
    code, out, _ = run(capsys, "predict", "--global-batch", "512", "--json")
    d = json.loads(out)
    assert d["inputs"]["plan"]["global_batch"] == 512 and d["inputs"]["global_batch_source"] == "given"
    code, out, _ = run(capsys, "predict", "--help")
    assert "2,097,152 tokens" in " ".join(out.split())


def test_default_global_batch_rounds_to_what_the_plan_divides() -> None:
    from clustertwin.jobs import default_global_batch
    assert default_global_batch(8192, 32) == 256 and default_global_batch(4096) == 512
    assert default_global_batch(8192, 4608) == 4608       # never below one micro-batch per rank
    assert default_global_batch(8192, 48) == 240          # 5.33 units -> 5
    assert default_global_batch(3000, 1) == 699


def test_goodput_json_says_whether_the_plan_fits(capsys) -> None:
    code, out, err = run(capsys, "goodput", "--tokens", "1T", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["fits"] is True and 0 < d["memory_per_gpu_bytes"] <= d["hbm_bytes"]


def test_goodput_estimate_of_a_plan_that_does_not_fit_says_so() -> None:
    from clustertwin import predict
    from clustertwin.reliability import estimate_goodput
    p = predict("llama3-8b", gpu="h100", num_gpus=64, plan="tp=1,dp=64,zero=0")
    assert not p.fits
    assert estimate_goodput(p, 1e12).to_json()["fits"] is False


def test_search_by_goodput_says_what_it_ranks_by(capsys) -> None:
    code, out, err = run(capsys, "search", "-m", "gpt3-125m", "--gpu", "h100", "-n", "8", "--global-batch", "32",
                         "--seq-len", "1024", "--objective", "goodput", "--tokens", "1B", "--top", "3",
                         "--pareto-points", "1", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["ranked_by"].startswith("expected time to train")
    times = [p["time_to_train_s"] for p in d["plans"]]
    assert times == sorted(times)                     # the ranking is what the words say
    for p in d["plans"]:
        assert p["expected_time_to_train_s"] == p["time_to_train_s"] >= p["ideal_time_to_train_s"]
    code, out, _ = run(capsys, "search", "-m", "gpt3-125m", "--gpu", "h100", "-n", "8", "--global-batch", "32",
                       "--seq-len", "1024", "--objective", "goodput", "--tokens", "1B", "--top", "3",
                       "--pareto-points", "1")
    assert "by expected time to train" in " ".join(out.split())


def test_sweep_names_its_time_to_train_basis(tmp_path) -> None:
    duckdb = pytest.importorskip("duckdb")
    pytest.importorskip("pyarrow")
    from clustertwin.search.sweep import load_spec, run_sweep
    spec = tmp_path / "spec.yaml"
    spec.write_text(SWEEP.format(model="gpt3-125m", gpu="h100", extra="objectives: [time, goodput]\ntokens: 1B\n"
                                                                      "top: 2\n"))
    out = tmp_path / "out"
    run_sweep(load_spec(spec), out, workers=1)
    rows = duckdb.sql(f"SELECT objective, time_to_train_basis, time_to_train_s, ideal_time_to_train_s, "
                      f"expected_time_to_train_s FROM read_parquet('{out}/*.parquet') ORDER BY ALL").fetchall()
    by = {}
    for obj, basis, t, ideal, expected in rows:
        by.setdefault(obj, set()).add(basis)
        if obj == "time":   # steps x the predicted step; the ideal leaves out its wait for the slowest GPU
            assert ideal < t < 1.1 * ideal and expected is None
        else:
            assert t == expected and expected >= ideal
    assert by == {"time": {"steps_x_step_time"}, "goodput": {"expected_time_to_train"}}


# ---- the cluster-file schema -----------------------------------------------------------------------------
def _doc_examples() -> list[str]:
    text = (ROOT / "docs" / "clusters.md").read_text()
    return re.findall(r"```yaml\n(.*?)```", text.split("## Examples", 1)[1], flags=re.S)


def test_docs_cluster_examples_load(tmp_path) -> None:
    from clustertwin.catalog import load_cluster
    examples = _doc_examples()
    assert len(examples) >= 3
    topologies = set()
    for i, text in enumerate(examples):
        f = tmp_path / f"c{i}.yaml"
        f.write_text(text)
        c = load_cluster(f)
        topologies.add(c.topology)
        assert c.num_gpus > 0
    assert topologies == {"rail-optimized", "fat-tree"}


def test_docs_list_every_field_of_the_hardware_specs() -> None:
    from clustertwin.specs import ClusterSpec, GPUSpec, NodeSpec
    text = (ROOT / "docs" / "clusters.md").read_text()
    for cls in (GPUSpec, NodeSpec, ClusterSpec):
        for name in cls.model_fields:
            assert f"| `{name}` |" in text, name


def test_validation_table_write_rewrites_a_sections_table_in_place(tmp_path) -> None:
    """--write replaces the table and summary line under a heading naming a data file, and keeps the prose."""
    spec = importlib.util.spec_from_file_location("validation_table", ROOT / "benchmarks" / "validation_table.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    doc = tmp_path / "v.md"
    doc.write_text("# V\n\n## Llama (data/validation/dense_public_runs.csv)\n\nprose stays\n\n"
                   "| run | plan | measured | predicted | error | largest parts of the predicted step |\n"
                   "|---|---|---:|---:|---:|---|\n| stale | | 1 | 2 | +100% | |\n\nrows stale\n\nafter\n", encoding="utf-8")
    assert mod.run(["--write", str(doc)]) == 0
    text = doc.read_text(encoding="utf-8")
    assert "stale" not in text and "prose stays" in text and text.endswith("after\n")
    assert "| llama3-paper-405b-h100-8192gpu-seq8k |" in text and "\nrows 6, predicted 6, failed 0;" in text
