"""The serving twin (issue 18): hand-checkable step times, invariants of the simulation, the JSON
contract of `clustertwin serve`, serving validation files, and one-line refusals of bad input."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from clustertwin.catalog import cluster_for_gpu, load_gpu, load_model
from clustertwin.cli import main
from clustertwin.serve import (ServeRequest, ServeSetup, Simulator, StepPricer, get_engine, make_requests, memory_plan,
                               parse_slo, predict_serving)
from clustertwin.validate.serving import is_serving_csv, read_serving_runs, validate_serving

DATA = Path(__file__).parent / "data"
KEYS = ("schema", "output_tokens_per_s", "total_tokens_per_s", "requests_per_s", "ttft_s", "tpot_s", "itl_s",
        "e2e_latency_s", "kv_cache_tokens", "max_concurrent_requests", "memory_per_gpu_bytes", "fits",
        "energy_per_output_token_j", "assumptions")


def setup(model="llama3-8b", gpu="h100-sxm", n=1, **kw) -> ServeSetup:
    return ServeSetup(load_model(model), cluster_for_gpu(gpu, n), engine=kw.pop("engine", get_engine("vllm")), **kw)


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# ---- hand-checkable step times ----------------------------------------------------------------------
def test_decode_at_batch_one_reads_the_weights_once() -> None:
    s = setup()
    p = StepPricer(s)
    c = p.price(decode_seqs=1, decode_context=100)
    # every weight byte crosses HBM once per step, at the profile's achievable bandwidth; of the input
    # embedding only the rows of the step's tokens are read
    weights = s.weight_bytes_per_gpu - s.model.vocab_size * s.model.hidden_size * 2
    expect = weights / p.mem_bw
    gpu_s = c.total_s - c.overhead_s
    assert c.gemm_s + c.attention_s < 0.05 * gpu_s          # memory-bound
    assert expect <= gpu_s <= 1.1 * expect
    assert abs(c.total_s - sum(c.breakdown().values())) < 1e-12


def test_prefill_is_compute_bound_near_flops_over_peak() -> None:
    s = setup()
    p = StepPricer(s)
    tokens = 4096
    c = p.price(prefill=((tokens, 0),))
    flops = 2.0 * s.model.matmul_params_active * tokens
    ideal = flops / s.cluster.gpu.peak("bf16")
    assert c.gemm_s > c.memory_bound_s                        # compute-bound
    assert ideal < c.gemm_s + c.attention_s < ideal / 0.5       # between 50% and 100% of the peak
    assert abs(c.total_s - sum(c.breakdown().values())) < 1e-12


@pytest.mark.parametrize("model,gpu,n,kw", [("mixtral-8x7b", "h100-sxm", 2, {"tp": 2}),
                                             ("deepseek-v3", "h200", 8, {"tp": 8, "ep": 8, "precision": "fp8"}),
                                             ("llama3-70b", "h100-sxm", 8, {"tp": 4, "pp": 2})])
def test_breakdowns_sum_for_moe_mla_and_pipelines(model, gpu, n, kw) -> None:
    p = StepPricer(setup(model, gpu, n, **kw))
    for c in (p.price(prefill=((1000, 0), (500, 200)), decode_seqs=30, decode_context=30 * 800),
              p.price(decode_seqs=64, decode_context=64 * 2000)):
        assert c.total_s > 0
        assert abs(c.total_s - sum(c.breakdown().values())) < 1e-12


def test_weight_precision_shrinks_bytes_not_compute_dtype() -> None:
    bf = setup()
    awq = setup(precision="int4-awq")
    fp8 = setup(precision="fp8")
    assert awq.weight_bytes_per_gpu < fp8.weight_bytes_per_gpu < bf.weight_bytes_per_gpu
    assert awq.gemm_dtype == "bf16" and fp8.gemm_dtype == "fp8"
    assert StepPricer(awq).price(decode_seqs=1).total_s < StepPricer(bf).price(decode_seqs=1).total_s


def test_fp8_kv_cache_doubles_capacity() -> None:
    a = memory_plan(setup(), 2048).kv_cache_tokens
    b = memory_plan(setup(kv_cache_dtype="fp8"), 2048).kv_cache_tokens
    assert 1.95 < b / a < 2.05


def test_more_hbm_bandwidth_is_never_slower() -> None:
    gpu = load_gpu("h100-sxm")
    fast = gpu.model_copy(update={"hbm_bandwidth_bytes_per_s": 2 * gpu.hbm_bandwidth_bytes_per_s})
    slow_c = cluster_for_gpu("h100-sxm", 1)
    fast_c = slow_c.model_copy(update={"node": slow_c.node.model_copy(update={"gpu": fast})})
    m = load_model("llama3-8b")
    e = get_engine("vllm")
    slow_p = StepPricer(ServeSetup(m, slow_c, engine=e))
    fast_p = StepPricer(ServeSetup(m, fast_c, engine=e))
    for args in ({"decode_seqs": 1, "decode_context": 10}, {"decode_seqs": 128, "decode_context": 128 * 3000},
                 {"prefill": ((2048, 0),)}):
        assert fast_p.price(**args).total_s <= slow_p.price(**args).total_s


# ---- the simulation -----------------------------------------------------------------------------------
def test_higher_request_rate_never_lowers_ttft_p99() -> None:
    base = dict(model="llama3-8b", gpu="h100-sxm", num_gpus=1, input_len=1024, output_len=128, num_requests=300)
    p99 = [predict_serving(ServeRequest(**base, request_rate=r)).latency("ttft_s")["p99"] for r in (1, 5, 20, 80)]
    assert all(a <= b * 1.0001 for a, b in zip(p99, p99[1:])), p99


def test_throughput_never_exceeds_capacity() -> None:
    # capacity: a full batch of decodes per decode step time; no workload outruns it
    q = ServeRequest(model="llama3-8b", gpu="h100-sxm", num_gpus=1, input_len=256, output_len=256,
                     num_requests=600, max_num_seqs=64)
    r = predict_serving(q)
    step = StepPricer(r.setup).price(decode_seqs=64, decode_context=64 * 256).total_s
    assert r.output_tokens_per_s <= 64 / step * 1.001
    assert r.sim.max_running <= 64


def test_same_seed_same_numbers_other_seed_other_arrivals() -> None:
    q = ServeRequest(model="llama3-8b", gpu="h100-sxm", num_gpus=2, request_rate=30, num_requests=200,
                     input_len=512, output_len=64, seed=3)
    a, b = predict_serving(q).to_json(), predict_serving(q).to_json()
    assert a == b
    from dataclasses import replace
    c = predict_serving(replace(q, seed=4)).to_json()
    assert c["ttft_s"] != a["ttft_s"]


def test_every_request_finishes_and_cache_preempts_when_full() -> None:
    s = setup()
    req = make_requests(64, 2000, 500)
    r = Simulator(s, kv_cache_tokens=30_000).run(req)   # a cache too small for all 64 at once
    assert np.isfinite(r.finish_s).all()
    assert r.preemptions > 0 or r.max_running * 2500 <= 30_000
    assert (r.first_token_s <= r.finish_s).all()


def test_static_batch_and_disaggregation_and_trace(tmp_path) -> None:
    st = predict_serving(ServeRequest(model="llama3-8b", gpu="h100-sxm", num_gpus=1, workload="static",
                                      max_num_seqs=16, num_requests=32, input_len=128, output_len=32))
    assert st.fits and st.sim.max_running <= 16
    dis = predict_serving(ServeRequest(model="llama3-8b", gpu="h100-sxm", num_gpus=2, disaggregate="1:1",
                                       request_rate=4, num_requests=100, input_len=1024, output_len=64))
    assert dis.fits and dis.sim.kv_transfer_s > 0
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"arrival_time": i * 0.1, "input_len": 100 + i, "output_len": 20}) + "\n"
                             for i in range(30)))
    tr = predict_serving(ServeRequest(model="llama3-8b", gpu="h100-sxm", num_gpus=1, dataset_file=trace))
    assert tr.workload == "trace" and len(tr.sim.requests) == 30


def test_energy_between_static_and_tdp_and_monotone_in_power() -> None:
    from clustertwin.cost import power
    from clustertwin.serve.energy import energy_j
    r = predict_serving(ServeRequest(model="llama3-8b", gpu="h100-sxm", num_gpus=1, num_requests=50))
    g = r.setup.cluster.gpu
    e = r.energy_per_output_token_j
    tokens = r.sim.requests.output_len.sum()
    kinds = r.sim.busy_by_kind_s
    assert sum(kinds.values()) == pytest.approx(r.sim.busy_s)          # the breakdown covers the busy time
    assert power.static_power(g) * r.sim.duration_s / tokens < e < g.tdp_w * r.sim.duration_s / tokens
    # a second of tensor work costs more than one of memory work, which costs more than waiting
    base = {"tensor": 1.0, "memory": 1.0, "comm": 1.0, "wait": 1.0}
    for hot, cold in (("tensor", "memory"), ("memory", "wait")):
        more = dict(base, **{hot: base[hot] + 1.0})
        less = dict(base, **{cold: base[cold] + 1.0})
        assert energy_j(g, more, 10.0, 1, 1) > energy_j(g, less, 10.0, 1, 1)
    # energy follows the power model: a lower-power part of the same work (a 500 W cap) draws less
    capped = g.model_copy(update={"rated_tdp_w": g.rated_tdp_w or g.tdp_w, "tdp_w": 0.7 * g.tdp_w})
    assert energy_j(capped, kinds, r.sim.duration_s, 1, 1) < energy_j(g, kinds, r.sim.duration_s, 1, 1)


def test_slo_parsing() -> None:
    assert parse_slo("ttft_p99=2s, tpot_p99=50ms") == {"ttft_s": {"p99": 2.0}, "tpot_s": {"p99": 0.05}}


# ---- the command line --------------------------------------------------------------------------------
def test_serve_json_keys(capsys) -> None:
    code, out, err = run(capsys, "serve", "--model", "llama3-8b", "--gpu", "h100-sxm", "--num-gpus", "1",
                         "--num-requests", "40", "--input-len", "256", "--output-len", "32", "--json")
    assert code == 0, err
    d = json.loads(out)
    for k in KEYS:
        assert k in d, k
    assert d["schema"] == 1 and d["fits"] is True
    for k in ("ttft_s", "tpot_s", "itl_s", "e2e_latency_s"):
        assert set(d[k]) >= {"mean", "p50", "p90", "p99"}


def test_serve_table_fits_80_columns(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    from rich.console import Console
    import clustertwin.serve.cli as sc
    monkeypatch.setattr(sc, "console", Console(width=80, force_terminal=False))
    code, out, err = run(capsys, "serve", "--model", "llama3-8b", "--gpu", "h100-sxm", "--num-gpus", "1",
                         "--num-requests", "30", "--concurrency", "4")
    assert code == 0, err
    assert "TTFT" in out and "output tokens/s" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_serve_search_finds_a_config(capsys) -> None:
    code, out, err = run(capsys, "serve-search", "--model", "llama3-8b", "--slo", "ttft_p99=2s,tpot_p99=100ms",
                         "--request-rate", "2", "--gpus", "h100-sxm", "--max-num-seqs", "64", "--num-requests",
                         "40", "--input-len", "256", "--output-len", "32", "--max-replicas", "2", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["best"]["meets_slo"] and d["best"]["num_gpus"] >= 1
    gpus = [c["num_gpus"] for c in d["ranked"]]
    assert gpus == sorted(gpus)


BAD = [
    (["serve", "--slo", "x"], ["slo"]),   # serve has no --slo: a click error, still one line
    (["serve-search", "--slo", "ttft_p99=fast", "--request-rate", "1"], ["slo.ttft_p99"]),
    (["serve-search", "--slo", "latency_p99=2s", "--request-rate", "1"], ["slo", "unknown target"]),
    (["serve", "--plan", "tp=three"], ["plan.tp"]),
    (["serve", "--plan", "zz=2"], ["plan", "unknown field"]),
    (["serve", "--engine", "tgi"], ["engine", "tgi"]),
    (["serve", "--concurrency", "4", "--request-rate", "2"], ["concurrency", "request-rate"]),
    (["serve", "--input-len", "0"], ["input_len"]),
    (["serve", "--input-len", "100000000"], ["input_len"]),
    (["serve", "--input-len", "9000", "--output-len", "9000"], ["input_len", "context"]),
    (["serve", "--precision", "int3"], ["precision"]),
    (["serve", "--kv-cache-dtype", "int8"], ["kv_cache_dtype"]),
    (["serve", "--num-gpus", "8", "--plan", "tp=3"], ["plan"]),
    (["serve", "--disaggregate", "2:1", "--num-gpus", "2"], ["disaggregate"]),
    (["serve", "--dataset-file", "nowhere.csv"], ["dataset_file"]),
    (["serve-search", "--slo", "ttft_p99=1s", "--request-rate", "1", "--rank-by", "cost", "--gpus", "h100-sxm"],
     ["gpu_hour_price"]),
]


@pytest.mark.parametrize("args,words", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_exit_2(capsys, args, words) -> None:
    code, out, err = run(capsys, *args)
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert re.match(r"error: [^:;]+: .+", lines[0]), lines[0]
    for w in words:
        assert w in lines[0], (w, lines[0])


# ---- validation files ----------------------------------------------------------------------------------
def test_serving_csv_is_told_from_training_by_its_columns() -> None:
    assert is_serving_csv(DATA / "serving_runs_small.csv")
    root = Path(__file__).resolve().parents[1]
    assert not is_serving_csv(root / "data" / "validation" / "public_runs.csv")


def test_serving_validation_never_loses_a_row(capsys) -> None:
    rows = read_serving_runs(DATA / "serving_runs_small.csv")
    rep = validate_serving(rows)
    assert len(rep.rows) == 6
    assert len(rep.ok_rows) == 5 and len(rep.failed_rows) == 1     # the sharegpt row draws the named dataset
    assert all(r.reason for r in rep.failed_rows)
    assert any("dp_replicas empty" in a for r in rep.rows for a in r.assumptions)
    code, out, err = run(capsys, "validate", str(DATA / "serving_runs_small.csv"), "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["kind"] == "serving" and len(d["rows"]) == 6
    assert set(d["mape"]) >= {"throughput", "latency"}


def test_serving_view_page(tmp_path, capsys) -> None:
    pytest.importorskip("plotly")
    from clustertwin.report.views import embedded_data
    page = tmp_path / "serve.html"
    code, out, err = run(capsys, "serve", "--model", "llama3-8b", "--gpu", "h100-sxm", "--num-gpus", "1",
                         "--num-requests", "30", "--input-len", "256", "--output-len", "16", "--html", str(page))
    assert code == 0, err
    d = embedded_data(page.read_text(encoding="utf-8"))
    rates = [p["request_rate"] for p in d["curve"]]
    assert rates == sorted(rates) and len(rates) == 7
    assert set(d["samples"]) == {"ttft_s", "tpot_s", "e2e_latency_s"}


def test_disaggregated_kv_transfer_is_cache_bytes_over_the_nics() -> None:
    s = ServeSetup(load_model("llama3-8b"), cluster_for_gpu("h100-sxm", 2), dp=2, engine=get_engine("vllm"))
    r = Simulator(s, kv_cache_tokens=100_000, disaggregate=(1, 1)).run(make_requests(1, 1000, 10))
    # 1000 prompt tokens of KV (32 layers x 8 heads x 128 x 2 x 2 bytes = 128 KiB each) over one GPU's NIC share
    expect = 1000 * s.kv_bytes_per_token / s.cluster.node.nic_bandwidth_per_gpu
    assert s.kv_bytes_per_token == 32 * 8 * 128 * 2 * 2
    assert r.kv_transfer_s == pytest.approx(expect)


# ---- named datasets and per-run traces -------------------------------------------------------------------
def test_dataset_sampling_is_deterministic_and_from_the_published_sample() -> None:
    from clustertwin.serve.dataset import get_dataset, sample
    a_in, a_out = sample("sharegpt", 300, seed=7)
    b_in, b_out = sample("sharegpt", 300, seed=7)
    c_in, _ = sample("sharegpt", 300, seed=8)
    assert (a_in == b_in).all() and (a_out == b_out).all() and not (a_in == c_in).all()
    pool = get_dataset("sharegpt").input_lengths()
    assert len(pool) == 1000 and int(pool.sum()) == 215196      # dstack's total_input_tokens for 1,000 prompts
    assert set(a_in.tolist()) <= set(pool.tolist())
    assert len(set(sample("sharegpt", 1000, seed=1)[0].tolist())) == len(set(pool.tolist()))   # no repeats first
    assert (a_out == 194).all() and (sample("sharegpt", 5, output_len=64)[1] == 64).all()


def test_dataset_without_published_lengths_is_refused_with_the_reason() -> None:
    from clustertwin.errors import DataError
    from clustertwin.serve.dataset import missing, sample
    assert "input-length" in missing("mlperf-mixtral")
    with pytest.raises(DataError):
        sample("mlperf-mixtral", 10)
    with pytest.raises(DataError):
        sample("no-such-set", 10)


def test_openorca_draws_its_published_means() -> None:
    """MLPerf llama2-70b's set: 5,463,976 input tokens over 24,576 samples (222.3 each) and the reference
    run's 294.45 output tokens per sample; only the means are published, so every request gets them."""
    from clustertwin.serve.dataset import missing, sample
    assert missing("openorca") == ""
    inp, out = sample("openorca", 8, seed=1)
    assert (inp == round(5463976 / 24576)).all() and (inp == 222).all()
    assert (out == 294).all()
    assert (sample("mlperf-openorca", 3, output_len=100)[1] == 100).all()


def test_serve_draws_a_named_dataset(capsys) -> None:
    r = predict_serving(ServeRequest(model="llama3-8b", gpu="h100-sxm", num_gpus=1, dataset="sharegpt",
                                     request_rate=2, num_requests=60, seed=3))
    assert r.fits and len(set(r.sim.requests.input_len.tolist())) > 10
    assert any(a.startswith("dataset sharegpt") for a in r.assumptions)
    code, out, err = run(capsys, "serve", "--dataset", "mlperf-mixtral", "--num-requests", "5")
    assert code == 2 and err.startswith("error: dataset:")


def test_dataset_rows_are_predicted_from_a_trace_or_a_named_dataset(tmp_path) -> None:
    """A `dataset` row replays the run's per-request lengths (serving_sources/lengths/<result file>.csv beside
    the CSV), else draws the named dataset, else keeps its reason."""
    src = (DATA / "serving_runs_small.csv").read_text(encoding="utf-8").splitlines()
    head = src[0].split(",")
    base = dict(zip(head, src[1].split(",")))
    rows = []
    for rid, url, ds in (("tr", "https://example.org/runs/run-a.json", "sharegpt"), ("ds", "", "sharegpt"),
                         ("no", "", "mlperf-mixtral")):
        d = dict(base, run_id=rid, source_url=url, input_len="", output_len="", dataset=ds, num_requests="40")
        rows.append(",".join(d[h] for h in head))
    (tmp_path / "runs.csv").write_text("\n".join([src[0], *rows]) + "\n", encoding="utf-8")
    lengths = tmp_path / "serving_sources" / "lengths"
    lengths.mkdir(parents=True)
    (lengths / "run-a.csv").write_text("input_len,output_len\n" + "100,20\n" * 40, encoding="utf-8")
    rep = validate_serving(read_serving_runs(tmp_path / "runs.csv"))
    by = {r.run_id: r for r in rep.rows}
    assert by["tr"].predicted and any("per-request" in a for a in by["tr"].assumptions)
    assert by["ds"].predicted and by["ds"].predicted != by["tr"].predicted
    assert by["no"].predicted is None and "mlperf-mixtral" in by["no"].reason


# ---- engine options: attention data parallelism, multi-step scheduling, eager ------------------------
def test_attention_dp_keeps_flops_and_splits_the_mla_cache_over_ranks() -> None:
    m = load_model("deepseek-v3")
    tp = setup("deepseek-v3", "h200", 8, tp=8, ep=8, precision="fp8")
    adp = setup("deepseek-v3", "h200", 8, tp=8, ep=8, precision="fp8", attention_dp=8)
    # MLA caches its latent on every TP rank; data-parallel attention keeps a sequence on one rank
    assert adp.kv_bytes_per_token == pytest.approx(tp.kv_bytes_per_token / 8)
    def flops(s, names):
        return sum(2 * b * r * n * k for name, b, r, n, k, _ in s.gemms(64, True) if name in names)
    weights = lambda s: sum(w for name, *_, w in s.gemms(64, True) if name.startswith("attn"))  # noqa: E731
    split = ("attn.q_b", "attn.kv_b", "attn.o")          # head-split under TP: the same work per GPU
    assert flops(adp, split) == pytest.approx(flops(tp, split), rel=1e-9)
    shared = ("attn.q_a", "attn.kv_a")                   # replicated under TP, each rank's own tokens under DP
    assert flops(adp, shared) == pytest.approx(flops(tp, shared) / 8, rel=1e-9)
    assert weights(adp) > 4 * weights(tp) and adp.weight_bytes_per_gpu > tp.weight_bytes_per_gpu
    assert m.mla is not None
    with pytest.raises(Exception):
        setup("deepseek-v3", "h200", 8, tp=8, ep=8, attention_dp=4)


def test_multi_step_scheduling_delays_admission_not_decode() -> None:
    q = dict(model="llama3-8b", gpu="h100-sxm", num_gpus=1, input_len=256, output_len=128, request_rate=8,
             num_requests=150, seed=1)
    one = predict_serving(ServeRequest(**q))
    ten = predict_serving(ServeRequest(**q, num_scheduler_steps=10))
    assert ten.latency("ttft_s")["mean"] > one.latency("ttft_s")["mean"]      # arrivals wait for the run
    assert ten.latency("itl_s")["p50"] > 5 * one.latency("itl_s")["p50"]       # tokens stream once per run
    assert ten.output_tokens_per_s == pytest.approx(one.output_tokens_per_s, rel=0.05)


def test_engine_flags_in_notes_reach_the_request() -> None:
    from clustertwin.validate.serving import request_of
    src = (DATA / "serving_runs_small.csv").read_text(encoding="utf-8").splitlines()
    row = dict(zip(src[0].split(","), src[1].split(",")))
    row["notes"] = "vllm serve --num-scheduler-steps 10 --enforce-eager"
    notes: list[str] = []
    q = request_of(row, notes)
    assert q.num_scheduler_steps == 10 and q.enforce_eager and "adp=1" in q.plan
    row.update(notes="--tp 2 --enable-dp-attention", tp="2", num_gpus="2", dp_replicas="1")
    assert "adp=2" in request_of(row, []).plan


def test_token_budget_and_chunked_prefill_flags_in_notes_reach_the_engine() -> None:
    from clustertwin.serve.run import build_setup
    from clustertwin.validate.serving import request_of
    src = (DATA / "serving_runs_small.csv").read_text(encoding="utf-8").splitlines()
    row = dict(zip(src[0].split(","), src[1].split(",")))
    row["notes"] = "vllm serve --enable-chunked-prefill=False --max-num-batched-tokens 4096"
    q = request_of(row, [])
    assert q.chunked_prefill is False and q.max_num_batched_tokens == 4096
    eng = build_setup(q)[0].engine
    assert eng.chunked_prefill is False and eng.max_num_batched_tokens == 4096
    row["notes"] = "trtllm-serve --max_batch_size 512 --max_num_tokens 16384"
    q = request_of(row, [])
    assert q.max_num_batched_tokens == 16384 and q.chunked_prefill is None
    assert build_setup(q)[0].engine.chunked_prefill is True     # the engine default stays


def test_whole_prompt_prefill_never_lowers_first_token_latency_of_a_lone_long_prompt() -> None:
    # one request at a time: without chunking the prompt is prefilled in one iteration instead of
    # budget-sized chunks, so the time to the first token cannot be longer than the chunked one (the
    # unchunked budget must hold a whole request, input + output, as vLLM requires of max_model_len)
    q = dict(model="llama3-8b", gpu="h100-sxm", num_gpus=1, input_len=6000, output_len=16, concurrency=1,
             num_requests=4, seed=0)
    chunked = predict_serving(ServeRequest(**q, max_num_batched_tokens=2048))
    whole = predict_serving(ServeRequest(**q, max_num_batched_tokens=6016, chunked_prefill=False))
    assert whole.latency("ttft_s")["mean"] <= chunked.latency("ttft_s")["mean"] * 1.0001


def test_attention_dp_prefill_waits_for_the_rank_that_holds_the_sequence() -> None:
    from clustertwin.serve.workload import StepPricer
    adp = StepPricer(setup("deepseek-v3", "h200", 8, tp=8, attention_dp=8, precision="fp8"))
    tp = StepPricer(setup("deepseek-v3", "h200", 8, tp=8, precision="fp8"))
    assert tp.attention_dp_excess(((3200, 0),), 0) == 0.0 and adp.attention_dp_excess((), 64) == 0.0
    lone = adp.attention_dp_excess(((3200, 0),), 0)
    pg, pm = adp.prefill_attention(3200, 0)
    # one rank runs all heads of the chunk: (adp - 1) x the even split's attention core, plus the
    # projections of 3200 rows instead of 400
    proj = adp._attention_projections(3200) - adp._attention_projections(400)
    assert lone == pytest.approx((pg + pm) * 7 + proj, rel=1e-9)
    assert proj > 0
    # eight equal prompts land on eight ranks: nothing waits
    assert adp.attention_dp_excess(((1024, 0),) * 8, 0) == pytest.approx(0.0, abs=1e-12)
    c = adp.price(prefill=((3200, 0),), decode_seqs=16, decode_context=16 * 2000)
    assert sum(c.breakdown().values()) == pytest.approx(c.total_s)
    assert c.attention_s >= lone


def test_serve_no_chunked_prefill_flag_reaches_the_engine(capsys) -> None:
    code, out, err = run(capsys, "serve", "--model", "llama3-8b", "--gpu", "h100-sxm", "--num-gpus", "1",
                         "--num-requests", "4", "--concurrency", "1", "--input-len", "6000", "--output-len", "8",
                         "--max-num-batched-tokens", "6008", "--no-chunked-prefill", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["fits"] is True and any(a.startswith("chunked prefill off") for a in d["assumptions"])


def test_bias_by_gives_signed_error_and_mape_per_group():
    """Residuals keep their sign: two latency rows 10% and 30% low average -20% bias, 20% MAPE; a
    throughput row is kept out of the latency family."""
    from clustertwin.validate.serving import ServingReport, ServingRow
    rows = []
    for metric, measured, predicted, gpu in (("ttft_mean_s", 1.0, 0.9, "h100-sxm"), ("ttft_mean_s", 2.0, 1.4, "h100-sxm"),
                                             ("itl_mean_s", 0.01, 0.012, "h200"),
                                             ("output_tokens_per_s", 100.0, 150.0, "h100-sxm")):
        r = ServingRow("run", metric, measured, {"gpu": gpu}, 2)
        r.predicted = predicted
        rows.append(r)
    rep = ServingReport(rows)
    got = rep.bias_by(lambda r: r.raw["gpu"], "latency")
    n, bias, mape = got["h100-sxm"]
    assert n == 2 and abs(bias - (-0.2)) < 1e-12 and abs(mape - 0.2) < 1e-12
    assert got["h200"][0] == 1 and abs(got["h200"][1] - 0.2) < 1e-12
    thr = rep.bias_by(lambda r: r.metric, "throughput")
    assert list(thr) == ["output_tokens_per_s"] and abs(thr["output_tokens_per_s"][1] - 0.5) < 1e-12
    everything = rep.bias_by(lambda r: "all")
    assert everything["all"][0] == 4


def test_residuals_table_prints_signed_groups(tmp_path):
    """benchmarks/serving_validation_table.py --residuals: one table per family and grouping, signs kept."""
    import importlib.util
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("svt", root / "benchmarks" / "serving_validation_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)   # type: ignore[union-attr]
    text = mod.residuals(root / "tests" / "data" / "serving_runs_small.csv")
    assert "## throughput by metric" in text and "## latency by load" in text
    assert "| bias |" in text and ("| +" in text or "| -" in text)


# ---- kernels per layer, counted per engine ----------------------------------------------------------
def test_kernel_counts_per_engine_are_the_counted_layers():
    """A dense Llama layer at tp 1: vLLM 10, SGLang 11, TensorRT-LLM 9 kernels; plus 8 per step."""
    from clustertwin.constants import group
    for engine, per_layer in (("vllm", 10), ("sglang", 11), ("trtllm", 9)):
        p = StepPricer(setup(engine=get_engine(engine)))
        kc = group(f"serve.kernels.{engine}")
        assert p.kernels == 32 * per_layer + kc["per_step"]


def test_tensor_parallel_adds_two_all_reduce_kernels_per_layer():
    one = StepPricer(setup(model="llama3-70b", n=8, engine=get_engine("trtllm")))
    tp = StepPricer(setup(model="llama3-70b", n=8, tp=8, engine=get_engine("trtllm")))
    assert tp.kernels - one.kernels == 2 * 80


def test_moe_and_mla_layers_launch_more_kernels_than_dense():
    from clustertwin.constants import group
    kc = group("serve.kernels.vllm")
    p = StepPricer(setup(model="deepseek-v3", gpu="h200", n=8, tp=8, precision="fp8"))
    m = p.s.model
    per_layer = (kc["dense_layer"] + kc["tp_layer"] + kc["mla_layer"] + kc["mla_rope"] + kc["mla_glue"])
    # FP8 input quantizations: q_a, q_b, kv_a, o plus the dense MLP's two or the MoE layer's shared expert's
    # and experts' four (kv_b runs as the absorbed batched GEMMs)
    dense = m.num_layers - m.num_moe_layers
    fp8 = kc["fp8_per_gemm"] * (dense * 6 + m.num_moe_layers * 8)
    moe = kc["moe_layer"] + kc["grouped_topk"] + kc["shared_expert"]
    assert p.kernels == m.num_layers * per_layer + m.num_moe_layers * moe + fp8 + kc["per_step"]


def test_fp8_quantization_kernels_one_per_fp8_gemm():
    """A Llama layer quantizes the inputs of qkv, o, gate_up and down (4); an FFN-only recipe those of its
    MLP alone (2); 16-bit weights none; TensorRT-LLM folds them into its other kernels."""
    from clustertwin.constants import group
    kc = group("serve.kernels.vllm")
    bf16 = StepPricer(setup(engine=get_engine("vllm")))
    fp8 = StepPricer(setup(engine=get_engine("vllm"), precision="fp8"))
    ffn = StepPricer(setup(engine=get_engine("vllm"), precision="fp8-ffn"))
    assert fp8.kernels - bf16.kernels == 32 * 4 * kc["fp8_per_gemm"]
    assert ffn.kernels - bf16.kernels == 32 * 2 * kc["fp8_per_gemm"]
    t16 = StepPricer(setup(engine=get_engine("trtllm")))
    t8 = StepPricer(setup(engine=get_engine("trtllm"), precision="fp8"))
    assert t8.kernels == t16.kernels


def test_deepseek_layers_launch_the_engines_counted_extras():
    """SGLang's FP8 MLA layer on an NVIDIA GPU adds the per-tensor quantizations of its two absorbed batched
    GEMMs; on an AMD GPU the weights' per-step dequantization instead; vLLM neither (its absorbed weights
    run as block-FP8 linears). TensorRT-LLM's DeepSeek path is not counted here (no extras)."""
    from clustertwin.constants import group
    ks = group("serve.kernels.sglang")
    m_layers = 61

    def kernels(engine: str, gpu: str, precision: str = "fp8") -> int:
        return StepPricer(setup(model="deepseek-v3", gpu=gpu, n=8, tp=8, precision=precision,
                                engine=get_engine(engine))).kernels
    assert kernels("sglang", "h200") - kernels("sglang", "mi300x") == m_layers * (
        ks["mla_bmm_quant"] - ks["mla_bmm_dequant_rocm"])
    assert kernels("vllm", "h200") == kernels("vllm", "mi300x")
    assert kernels("sglang", "h200") > kernels("vllm", "h200") > kernels("trtllm", "h200")


def test_split_kv_combine_kernel_only_on_small_decode_batches():
    """vLLM/SGLang launch a combine kernel per layer when a decode batch leaves SMs idle; TensorRT-LLM's
    multi-block attention merges in-kernel; a prefill step or a full batch launches none."""
    v = StepPricer(setup(engine=get_engine("vllm")))
    assert v.kernel_count(1) == v.kernels + 32
    assert v.kernel_count(4096) == v.kernels
    assert v.kernel_count(1, prefill=True) == v.kernels
    t = StepPricer(setup(engine=get_engine("trtllm")))
    assert t.kernel_count(1) == t.kernels
    # the overhead is the counted kernels' boundaries plus the engine's host time (CUDA graph decode); at
    # batch 1 every kernel streams its weights, so each pays the decode stall (5 us) instead of the 1 us gap
    c = v.price(decode_seqs=1, decode_context=1000)
    assert v.compute_bound_kernels(1) == 0
    assert c.overhead_s == pytest.approx(v.kernel_count(1) * 5e-6 + v.s.engine.step_overhead_s)


def test_decode_kernel_stall_applies_to_streaming_kernels_of_decode_steps_only():
    """A decode-only step's streaming kernels each idle the GPU serve.decode_kernel_stall_s (Hazy Research's
    per-kernel bubble); a step with prefill keeps the 1 us gap; compute-bound GEMMs (their fill/drain priced
    in the GEMM) keep the gap; the stall does not depend on bandwidth."""
    from clustertwin.constants import value
    stall, gap = value("serve.decode_kernel_stall_s"), value("host.kernel_gap_s")
    p = StepPricer(setup(engine=get_engine("trtllm")))
    host = p.s.engine.step_overhead_s
    one = p.price(decode_seqs=1, decode_context=500)
    assert one.overhead_s == pytest.approx(p.kernels * stall + host)
    pre = p.price(prefill=((512, 0),))
    assert pre.overhead_s >= p.kernels * gap + host - 1e-12 and pre.overhead_s < one.overhead_s
    big = p.price(decode_seqs=2048, decode_context=2048 * 500)
    cb = p.compute_bound_kernels(2048)
    assert cb > 0 and big.overhead_s < one.overhead_s
    assert p.stalled_kernels(p.kernels, 2048, False) == p.kernels - cb
    h200 = StepPricer(setup(gpu="h200", engine=get_engine("trtllm")))
    assert h200.overhead(0.0, True, 100, 100) == pytest.approx(p.overhead(0.0, True, 100, 100))
    amd = StepPricer(setup(gpu="mi300x", engine=get_engine("vllm")))     # measured on NVIDIA only
    assert amd.overhead(0.0, True, 100, 100) == pytest.approx(100 * gap + amd.s.engine.step_overhead_s)


def test_a_token_budget_below_the_batch_limit_is_refused(capsys):
    """A step must give every running sequence a token: --max-num-batched-tokens below --max-num-seqs is
    refused with one line naming the flag (vLLM's SchedulerConfig refuses the same), exit code 2."""
    code, out, err = run(capsys, "serve", "-m", "llama3-8b", "--gpu", "h100", "--num-gpus", "1",
                         "--max-num-batched-tokens", "64", "--max-num-seqs", "256", "--input-len", "128",
                         "--output-len", "16", "--num-requests", "10", "--concurrency", "2")
    assert code == 2 and "max-num-batched-tokens" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_poisson_row_simulates_its_whole_run_and_an_offline_row_a_sample() -> None:
    """An open loop near saturation reaches its steady batch only after about one end-to-end latency of
    arrivals, so a Poisson row keeps its request count (MLPerf Server: rate x minimum duration); offline
    and closed-loop rows are sampled (their steady state comes within a few thousand requests)."""
    from clustertwin.validate.serving import MAX_POISSON_REQUESTS, MAX_REQUESTS, request_of
    src = (DATA / "serving_runs_small.csv").read_text(encoding="utf-8").splitlines()
    row = dict(zip(src[0].split(","), src[1].split(",")))
    row.update(workload="poisson", request_rate="101.25", concurrency="", num_requests="243000")
    assert request_of(row, []).num_requests == 243000 <= MAX_POISSON_REQUESTS
    row.update(workload="offline", request_rate="", num_requests="274560")
    assert request_of(row, []).num_requests == MAX_REQUESTS
def test_engine_version_rules_hold_below_their_release_and_for_the_models_they_name() -> None:
    from clustertwin.constants import value
    from clustertwin.serve.engines import engine_for_version, parse_version
    assert parse_version("0.7.3.dev138+g21f6ca217") == (0, 7, 3) and parse_version("v0.4.3.post2") == (0, 4, 3)
    assert parse_version("") is None and parse_version("nightly") is None
    vllm = get_engine("vllm")
    old, notes = engine_for_version(vllm, "0.7.3.dev138+g21f6ca217", mla=True)
    # eager V0, no chunked prefill for MLA, the block-FP8 dense GEMM's K steps, the absorbed MLA matrices kept
    # beside the weights, the Triton fused MoE's rate
    assert old.chunked_prefill is False and old.prefill_stalls_decode and len(notes) == 5
    assert old.mla_absorbed_weights
    gqa = engine_for_version(vllm, "0.7.3", mla=False)[0]                # a GQA model keeps chunked prefill,
    assert gqa.chunked_prefill and gqa.eager_dispatch_s == value("host.torch_forward_per_kernel_s")  # V0: eager
    assert vllm.eager_dispatch_s == value("host.compiled_per_kernel_s")  # V1 compiles
    assert engine_for_version(vllm, "0.8.0", mla=True)[0] == vllm        # V1 from 0.8
    assert engine_for_version(vllm, None, mla=True)[0] == vllm           # unknown release: current defaults
    assert engine_for_version(get_engine("sglang"), "0.4.1", mla=False)[0] == get_engine("sglang")
    assert engine_for_version(get_engine("sglang"), "0.4.6", mla=True)[0] == get_engine("sglang")


def test_vllm_v0_unchunked_budget_is_the_longest_sequence() -> None:
    """vLLM V0 without chunked prefill (an MLA model below 0.8) schedules max(max_model_len, 2048) tokens a
    step when the run's --max-model-len is known; V1, chunked runs and an unknown length keep the profile's."""
    from clustertwin.serve.engines import engine_for_version
    vllm = get_engine("vllm")
    e, notes = engine_for_version(vllm, "0.7.3", mla=True, max_model_len=32768)
    assert e.max_num_batched_tokens == 32768 and not e.chunked_prefill and len(notes) == 6   # 5 rules + the budget
    assert engine_for_version(vllm, "0.7.3", mla=True, max_model_len=1024)[0].max_num_batched_tokens == 2048
    assert engine_for_version(vllm, "0.7.3", mla=True)[0].max_num_batched_tokens == vllm.max_num_batched_tokens
    assert engine_for_version(vllm, "0.7.3", mla=False, max_model_len=32768)[0].max_num_batched_tokens == \
        vllm.max_num_batched_tokens                                          # chunked: not this rule
    assert engine_for_version(vllm, "0.8.0", mla=True, max_model_len=32768)[0] == vllm


def test_max_model_len_flag_of_a_row_reaches_the_engine() -> None:
    from clustertwin.serve.run import build_setup
    from clustertwin.validate.serving import request_of
    import csv
    path = Path(__file__).resolve().parents[1] / "data" / "validation" / "serving_runs.csv"
    with path.open(encoding="utf-8") as f:
        row = next(r for r in csv.DictReader(f) if r["run_id"] == "dstack-dsr1-vllm-mi300x-tp8-c128-3200-800")
    assert "--max-model-len 32768" in row["notes"]
    q = request_of(row, [])
    assert q.max_model_len == 32768
    assert build_setup(q)[0].engine.max_num_batched_tokens == 32768


def test_which_engines_run_decodes_in_a_prefill_step() -> None:
    assert get_engine("sglang").prefill_stalls_decode                     # prefill batches run alone
    assert not get_engine("trtllm").prefill_stalls_decode                # in-flight batching mixes them
    vllm = get_engine("vllm")
    assert not vllm.prefill_stalls_decode and vllm.with_overrides(chunked_prefill=False).prefill_stalls_decode


def test_a_prefill_step_that_stalls_decodes_slows_their_tokens() -> None:
    # Poisson arrivals: every arrival's prefill step holds up the running decodes, so the time per output
    # token grows against an engine that runs them in the same step (whose prefill steps carry the decodes,
    # so its first tokens come later); every request still finishes
    eng = get_engine("vllm").with_overrides(chunked_prefill=False)
    runs = {}
    for mixed in ("chunked", "always"):
        s = setup("llama3-8b", "h100-sxm", 1, engine=eng.with_overrides(mixed_batches=mixed))
        mem = memory_plan(s, 2048 + 256)
        sim = Simulator(s, mem.kv_cache_tokens)
        assert sim.stall is (mixed == "chunked")
        runs[mixed] = sim.run(make_requests(200, 2048, 256, workload="poisson", request_rate=8, seed=0))
    assert np.isfinite(runs["chunked"].finish_s).all()
    assert runs["chunked"].tpot_s.mean() > runs["always"].tpot_s.mean()
    assert runs["chunked"].ttft_s.mean() < runs["always"].ttft_s.mean()


def test_engine_version_of_a_row_reaches_the_request() -> None:
    from clustertwin.serve.run import build_setup
    from clustertwin.validate.serving import request_of
    src = (DATA / "serving_runs_small.csv").read_text(encoding="utf-8").splitlines()
    row = dict(zip(src[0].split(","), src[1].split(",")))
    row.update(engine="vllm", engine_version="0.7.3", notes="")
    q = request_of(row, [])
    assert q.engine_version == "0.7.3"
    s = build_setup(q)[0]
    assert s.engine.chunked_prefill is (s.model.mla is None)      # V0 turns it off for MLA models only


def test_eager_steps_cost_the_engines_host_time_per_kernel() -> None:
    from clustertwin.constants import value
    from clustertwin.serve.run import build_setup
    q = dict(model="llama3-8b", gpu="h100-sxm", num_gpus=1, input_len=128, output_len=8, num_requests=2)
    v1 = build_setup(ServeRequest(**q))[0]
    eager = build_setup(ServeRequest(**q, enforce_eager=True))[0]
    assert eager.engine.eager_dispatch_s == value("host.torch_forward_per_kernel_s") > v1.engine.eager_dispatch_s
    p, pe = StepPricer(v1), StepPricer(eager)
    k = p.kernel_count(1)
    # host-bound decode outside a graph: max(gaps, launches - GPU time) + the engine's host time per step
    gpu = p.price(decode_seqs=1, decode_context=128).total_s - p.price(decode_seqs=1, decode_context=128).overhead_s
    want = max(k * value("host.kernel_gap_s"), k * value("host.torch_forward_per_kernel_s") - gpu) + \
        eager.engine.step_overhead_s
    assert pe.overhead(gpu, graph=False, kernels=k) == pytest.approx(want, rel=1e-12)
    assert pe.overhead(gpu, graph=False, kernels=k) >= p.overhead(gpu, graph=False, kernels=k)


def test_ffn_only_fp8_keeps_attention_and_edge_layers_16_bit() -> None:
    m = load_model("llama3.1-405b")
    fp8, ffn = (setup("llama3.1-405b", "h100-sxm", 8, tp=8, precision=p) for p in ("fp8", "fp8-ffn"))
    attn = sum(w for name, *_, w in ffn.gemms(1, False) if name.startswith("attn."))
    mlp = sum(w for name, *_, w in ffn.gemms(1, False) if name.startswith("mlp."))
    # hand count: attention weights at 2 bytes instead of 1 in every layer, the MLP of the first and last too
    extra = attn * m.num_layers + mlp * 2
    assert ffn.weight_bytes_per_gpu - fp8.weight_bytes_per_gpu == pytest.approx(extra, rel=1e-9)
    assert ffn.gemm_format("mlp.up") == (1.0, "fp8") and ffn.gemm_format("mlp.up", edge=True) == (2.0, "bf16")
    assert ffn.gemm_format("attn.qkv") == (2.0, "bf16") and fp8.gemm_format("attn.qkv") == (1.0, "fp8")
    # more bytes read per decode step: never faster; a smaller KV cache
    d = dict(decode_seqs=4, decode_context=4000)
    assert StepPricer(ffn).price(**d).total_s > StepPricer(fp8).price(**d).total_s
    assert memory_plan(ffn, 4096).kv_cache_tokens < memory_plan(fp8, 4096).kv_cache_tokens


def test_a_row_serving_metas_fp8_checkpoint_is_priced_ffn_only() -> None:
    from clustertwin.validate.serving import request_of
    src = (DATA / "serving_runs_small.csv").read_text(encoding="utf-8").splitlines()
    row = dict(zip(src[0].split(","), src[1].split(",")))
    row.update(precision="fp8", notes="vllm serve meta-llama/Llama-3.1-405B-FP8 --tensor-parallel-size 8")
    assert request_of(row, []).precision == "fp8-ffn"
    row.update(notes="vllm serve amd/Llama-3.1-405B-Instruct-FP8-KV")
    assert request_of(row, []).precision == "fp8"


def test_trtllm_pytorch_backend_before_1_0_decodes_without_cuda_graphs() -> None:
    from clustertwin.constants import value
    from clustertwin.serve.engines import engine_for_version
    from clustertwin.validate.serving import request_of
    trt = get_engine("trtllm")
    old, notes = engine_for_version(trt, "0.17.post1.dev", mla=True, backend="pytorch")
    assert old.cuda_graph_max_batch == 0 and old.eager_dispatch_s == value("host.torch_forward_per_kernel_s")
    assert len(notes) == 2                                                 # eager, and 0.17's unfused routing
    assert engine_for_version(trt, "0.17", mla=True)[0] == trt             # the TensorRT engine runtime
    assert engine_for_version(trt, "1.0", mla=True, backend="pytorch")[0] == trt
    src = (DATA / "serving_runs_small.csv").read_text(encoding="utf-8").splitlines()
    row = dict(zip(src[0].split(","), src[1].split(",")))
    row.update(engine="trtllm", notes="server: trtllm-serve --backend pytorch --max_batch_size 512")
    assert request_of(row, []).engine_backend == "pytorch"


def test_mixtral_output_mean_is_published_but_its_input_is_not() -> None:
    from clustertwin.serve.dataset import get_dataset, missing, sample
    d = get_dataset("mlperf-mixtral")
    assert d.output_mean == pytest.approx(145.9) and d.input_mean is None and d.input_file is None
    assert "input-length" in missing("mlperf-mixtral")            # still refused: no input statistic
    inp, out = sample("openorca", 2)                                # the llama2-70b set is unaffected
    assert (out == 294).all()


def test_chunked_prefill_off_named_as_an_engine_field_reaches_the_engine() -> None:
    from clustertwin.serve.run import build_setup
    from clustertwin.validate.serving import request_of
    src = (DATA / "serving_runs_small.csv").read_text(encoding="utf-8").splitlines()
    row = dict(zip(src[0].split(","), src[1].split(",")))
    for text in ("harness leaves enable_chunked_context False, TRT-LLM's default",
                 "vLLM 0.4.3's default enable_chunked_prefill False"):
        row["notes"] = text
        q = request_of(row, [])
        assert q.chunked_prefill is False and build_setup(q)[0].engine.chunked_prefill is False
    row["notes"] = "enable_chunked_prefill True"
    assert request_of(row, []).chunked_prefill is None


def test_block_fp8_gemms_take_at_least_their_chain_of_k_steps() -> None:
    """DeepSeek's block-FP8 dense GEMMs in releases that run the Triton/CUTLASS-2.x block GEMM take at least
    ceil(K / 128) x serve.block_fp8_k_step_s (kv_a at K = 7168: 56 steps); the router, kv_b and the routed
    experts keep their pricing, and so do other engines' releases and 16-bit weights."""
    from clustertwin.constants import value
    from clustertwin.serve.engines import engine_for_version
    step = value("serve.block_fp8_k_step_s")
    old = engine_for_version(get_engine("sglang"), "0.4.3.post2", mla=True)[0]
    assert old.block_fp8_k_step_s == step and get_engine("sglang").block_fp8_k_step_s == 0.0
    p = StepPricer(setup("deepseek-v3", "h200", 8, tp=8, ep=8, precision="fp8", engine=old))
    new = StepPricer(setup("deepseek-v3", "h200", 8, tp=8, ep=8, precision="fp8", engine=get_engine("sglang")))
    kv_a = next(g for g in p.s.gemms(1, True) if g[0] == "attn.kv_a")
    assert kv_a[4] == 7168 and p.block_fp8_floor("attn.kv_a", 7168) == pytest.approx(56 * step)
    assert sum(p._gemm(*kv_a)) == pytest.approx(56 * step)          # the chain exceeds its 4 MB read
    assert sum(new._gemm(*kv_a)) < 56 * step
    for name in ("moe.router", "attn.kv_b", "moe.experts_up"):
        assert p.block_fp8_floor(name, 7168) == 0.0
    # a step is never faster with the floor, and the breakdown still sums to the total
    a, b = p.price(decode_seqs=8, decode_context=8000), new.price(decode_seqs=8, decode_context=8000)
    assert a.total_s > b.total_s and sum(a.breakdown().values()) == pytest.approx(a.total_s)
    # prefill: 4,096 tokens make the GEMMs compute- or bandwidth-bound again where the chain is shorter
    assert p._gemm(*next(g for g in p.s.gemms(4096, True) if g[0] == "moe.shared_up"))[0] > 56 * step
    # ... and they compute at the 16-bit rate (the scaled accumulate after every K step); the experts at the
    # Triton fused_moe's own rate (test_triton_block_fp8_moe_runs_at_its_measured_rate)
    q_a = next(g for g in p.s.gemms(4096, True) if g[0] == "attn.q_a")
    assert p._gemm(*q_a)[0] > 1.5 * new._gemm(*q_a)[0]
    bf16 = StepPricer(setup("deepseek-v3", "h200", 8, tp=8, ep=8, precision="bf16", engine=old))
    mi = StepPricer(setup("deepseek-v3", "mi300x", 8, tp=8, ep=8, precision="fp8", engine=old))
    assert bf16.block_fp8_floor("attn.kv_a", 7168) == 0.0
    # AMD GPUs run the same Triton kernel (no CUTLASS or DeepGEMM block GEMM off CUDA): the floor holds there too
    assert mi.block_fp8_floor("attn.kv_a", 7168) == pytest.approx(56 * step)


def test_triton_block_fp8_moe_runs_at_its_measured_rate() -> None:
    """Releases that run DeepSeek's block-FP8 routed experts through the Triton fused_moe kernel (vLLM below 0.8,
    SGLang below 0.4.4) compute a prefill's expert GEMMs at most at serve.triton_block_fp8_moe_flops_per_s
    (vllm#13932: 2818.65 us for batch 2048 at TP 8 on H100, 64 TFLOP/s); a small decode batch's weight reads
    still set its time, a large one reaches the rate too; newer releases, 16-bit weights and the other GEMMs keep their pricing."""
    from clustertwin.constants import value
    from clustertwin.serve.engines import engine_for_version
    rate = value("serve.triton_block_fp8_moe_flops_per_s")
    # the constant is the measurement: 2 x 2048 tokens x 8 experts x (512 + 256) x 7168 FLOPs in 2818.65 us
    assert rate == pytest.approx(1.8039e11 / 2818.65e-6, rel=1e-3) and 6.3e13 < rate < 6.5e13
    for name, version in (("vllm", "0.7.3"), ("sglang", "0.4.3.post2")):
        old = engine_for_version(get_engine(name), version, mla=True)[0]
        assert old.block_fp8_moe_flops_per_s == rate
        assert engine_for_version(get_engine(name), version, mla=False)[0].block_fp8_moe_flops_per_s == 0.0
    assert engine_for_version(get_engine("vllm"), "0.8.0", mla=True)[0].block_fp8_moe_flops_per_s == 0.0
    assert engine_for_version(get_engine("sglang"), "0.4.4", mla=True)[0].block_fp8_moe_flops_per_s == 0.0
    assert get_engine("trtllm").block_fp8_moe_flops_per_s == 0.0
    old = engine_for_version(get_engine("vllm"), "0.7.3", mla=True)[0]
    p = StepPricer(setup("deepseek-v3", "h200", 8, tp=8, precision="fp8", engine=old))
    new = StepPricer(setup("deepseek-v3", "h200", 8, tp=8, precision="fp8", engine=get_engine("vllm")))
    t = 4096
    flops = 0.0
    for g in p.s.gemms(t, True):
        name, batch, rows, n, k, _ = g
        if not name.startswith("moe.experts"):
            assert p.triton_fp8_moe_floor(name, 2.0 * batch * rows * n * k) == 0.0
            continue
        f = 2.0 * batch * rows * n * k
        flops += f
        assert p.triton_fp8_moe_floor(name, f) == pytest.approx(f / rate)
        assert p._gemm(*g)[0] == pytest.approx(f / rate)        # compute-bound at the kernel's rate
        assert sum(p._gemm(*g)) > sum(new._gemm(*g))
    # hand check: the experts of one MoE layer do t x top-k x 3 x 7168 x 2048 / tp multiply-adds
    assert flops == pytest.approx(2 * t * 8 * 3 * 7168 * 2048 / 8)
    assert p.triton_fp8_moe_floor("moe.shared_up", 1e12) == 0.0 and p.triton_fp8_moe_floor("attn.o", 1e12) == 0.0
    # decode: a few tokens per expert, the weight reads take longer than the kernel's rate would
    for g in p.s.gemms(8, True):
        if g[0].startswith("moe.experts"):
            assert sum(p._gemm(*g)) == pytest.approx(sum(new._gemm(*g)))
    # a large decode batch (1,024 sequences, one token each) reaches the kernel's rate as a prefill does:
    # 1,024 x 8 / 256 = 32 tokens an expert is the measurement's own regime (2,048 tokens, 64 an expert)
    for g in p.s.gemms(1024, True):
        if g[0].startswith("moe.experts"):
            assert p._gemm(*g)[0] == pytest.approx(p.triton_fp8_moe_floor(g[0], 2.0 * g[1] * g[2] * g[3] * g[4]))
            assert sum(p._gemm(*g)) > sum(new._gemm(*g))
    # a prefill step is slower with the rate, never faster; its breakdown sums to its total
    a, b = p.price(prefill=((t, 0),)), new.price(prefill=((t, 0),))
    assert a.total_s > b.total_s and sum(a.breakdown().values()) == pytest.approx(a.total_s)
    # 16-bit weights are not the block-FP8 checkpoint: no rate
    bf16 = StepPricer(setup("deepseek-v3", "h200", 8, tp=8, precision="bf16", engine=old))
    assert bf16.triton_fp8_moe_floor("moe.experts_up", 1e12) == 0.0


def test_sglang_below_0_4_6_prefills_mla_absorbed_over_the_latent_widths() -> None:
    """SGLang below 0.4.6 (its Triton/FlashInfer backends) prefills MLA in the absorbed form: per head the
    attention's q.k runs over kv_lora_rank + rope = 576 and its output over kv_lora_rank = 512, against the
    decompressed 192 and 128, at FlashAttention-2's efficiency; 0.4.6 on, other engines and GQA models keep
    the FlashAttention pricing. Hand check: FLOPs scale by (576 + 512) / (192 + 128) = 3.4."""
    from clustertwin.serve.engines import engine_for_version
    old, notes = engine_for_version(get_engine("sglang"), "0.4.3.post2", mla=True)
    assert old.mla_absorbed_prefill and any("forward_absorb" in n for n in notes)
    for eng, ver, mla in (("sglang", "0.4.6", True), ("sglang", "0.4.1", False), ("vllm", "0.7.3", True),
                          ("trtllm", "0.17", True)):
        assert not engine_for_version(get_engine(eng), ver, mla=mla)[0].mla_absorbed_prefill
    p = StepPricer(setup("deepseek-v3", "h200", 8, tp=8, precision="fp8", engine=old))
    new = StepPricer(setup("deepseek-v3", "h200", 8, tp=8, precision="fp8", engine=get_engine("sglang")))
    m = p.s.model
    assert p.prefill_head_dims()[:2] == (m.mla.kv_lora_rank + m.mla.qk_rope_head_dim, m.mla.kv_lora_rank) == (576, 512)
    assert new.prefill_head_dims()[:2] == (m.qk_head_dim, m.v_head_dim)
    a, b = sum(p.prefill_attention(4096, 0)), sum(new.prefill_attention(4096, 0))
    assert a > (576 + 512) / (m.qk_head_dim + m.v_head_dim) * b     # more FLOPs, and a slower kernel
    step = p.price(prefill=((4096, 0),))
    assert step.total_s > new.price(prefill=((4096, 0),)).total_s
    assert sum(step.breakdown().values()) == pytest.approx(step.total_s)
    # decode is untouched: it reads the latent cache in the absorbed form in every release
    assert p.price(decode_seqs=8, decode_context=8000).attention_s == new.price(decode_seqs=8,
                                                                                decode_context=8000).attention_s


def test_sglang_triton_mla_decode_reads_the_latent_cache_once_per_16_heads() -> None:
    """SGLang's Triton MLA decode kernel (below 0.4.6) loads a sequence's latent cache once per program of
    serve.triton_mla_decode_block_h = 16 query heads: with attention data parallelism a GPU computes all 128
    heads (8 reads), under tp 8 its 16 (1 read); other engines read it once. Hand check: the memory-bound
    decode attention is 8 x the one-read figure."""
    from clustertwin.constants import value
    from clustertwin.serve.engines import engine_for_version
    old = engine_for_version(get_engine("sglang"), "0.4.1", mla=True)[0]
    assert old.mla_decode_head_block == value("serve.triton_mla_decode_block_h") == 16
    assert get_engine("sglang").mla_decode_head_block == 0
    adp_old = StepPricer(setup("deepseek-v3", "h200", 8, tp=8, attention_dp=8, precision="fp8", engine=old))
    adp_new = StepPricer(setup("deepseek-v3", "h200", 8, tp=8, attention_dp=8, precision="fp8",
                               engine=get_engine("sglang")))
    tp_old = StepPricer(setup("deepseek-v3", "h200", 8, tp=8, precision="fp8", engine=old))
    assert adp_old.mla_cache_reads() == 8 and tp_old.mla_cache_reads() == 1 and adp_new.mla_cache_reads() == 1
    s = adp_old.s
    one_read = s.kv_bytes_per_token_layer * s.model.num_layers / adp_old.mem_bw
    g_old, m_old = adp_old.decode_attention_per_token
    assert g_old == 0.0 and m_old == pytest.approx(8 * one_read)      # eight reads outrun the MLA FLOPs
    assert sum(adp_new.decode_attention_per_token) < 8 * one_read
    c = adp_old.price(decode_seqs=64, decode_context=64 * 4000)
    assert c.total_s > adp_new.price(decode_seqs=64, decode_context=64 * 4000).total_s
    assert sum(c.breakdown().values()) == pytest.approx(c.total_s)
    llama = StepPricer(setup("llama3-8b", "h100-sxm", 1, engine=old))
    assert llama.mla_cache_reads() == 1


def test_trtllm_pytorch_0_17_routes_deepseek_with_unfused_pytorch_ops() -> None:
    """TensorRT-LLM's PyTorch backend of the 0.17 line runs DeepSeek's group-limited routing as 18 PyTorch ops
    (serve.trtllm_pytorch_unfused_routing_kernels = 17 beyond the routing kernel moe_layer counts): each MoE
    layer launches 17 more kernels; the TensorRT engine runtime, 0.18 on and models without expert groups keep
    their count. Hand check: 58 MoE layers x 17 = 986 kernels more a step."""
    from clustertwin.constants import value
    from clustertwin.serve.engines import engine_for_version
    trt = get_engine("trtllm")
    old, notes = engine_for_version(trt, "0.17.post1.dev", mla=True, backend="pytorch")
    assert old.grouped_topk_kernels == value("serve.trtllm_pytorch_unfused_routing_kernels") == 17
    assert any("Deepseekv3RoutingImpl" in n for n in notes)
    assert engine_for_version(trt, "0.18", mla=True, backend="pytorch")[0].grouped_topk_kernels is None
    assert engine_for_version(trt, "0.17", mla=True)[0].grouped_topk_kernels is None    # TensorRT runtime
    cur = engine_for_version(trt, "0.18", mla=True, backend="pytorch")[0]
    a = StepPricer(setup("deepseek-v3", "h200", 8, tp=8, ep=8, precision="fp8", engine=old))
    b = StepPricer(setup("deepseek-v3", "h200", 8, tp=8, ep=8, precision="fp8", engine=cur))
    assert a.kernels - b.kernels == 17 * a.s.model.num_moe_layers == 986
    assert a.price(decode_seqs=4, decode_context=16000).total_s > b.price(decode_seqs=4, decode_context=16000).total_s
    mix_old = StepPricer(setup("mixtral-8x7b", "h200", 8, tp=8, engine=old))
    mix_new = StepPricer(setup("mixtral-8x7b", "h200", 8, tp=8, engine=cur))
    assert mix_old.kernels == mix_new.kernels                     # no expert groups: no grouped routing


def test_multi_step_streaming_per_step_changes_itl_only() -> None:
    """A server that streams each step's token (multi_step_stream="step") shows one inter-token gap per step;
    the schedule, and so throughput, TTFT and TPOT, is the same as when tokens arrive once per run."""
    q = dict(model="llama3-8b", gpu="h100-sxm", num_gpus=1, input_len=256, output_len=128, request_rate=8,
             num_requests=150, seed=1, num_scheduler_steps=10)
    run = predict_serving(ServeRequest(**q))
    step = predict_serving(ServeRequest(**q, multi_step_stream="step"))
    assert step.output_tokens_per_s == run.output_tokens_per_s
    assert step.latency("tpot_s")["mean"] == run.latency("tpot_s")["mean"]
    assert step.latency("ttft_s")["mean"] == run.latency("ttft_s")["mean"]
    assert step.latency("itl_s")["p50"] * 5 < run.latency("itl_s")["p50"]
    # a token per step: the ITL samples, weighted by the tokens each emitted, cover every decode token
    assert step.sim.itl_weights.sum() > 5 * run.sim.itl_weights.sum()
    with pytest.raises(Exception):
        predict_serving(ServeRequest(**q, multi_step_stream="chunk"))


def test_multi_step_stream_note_reaches_the_request() -> None:
    from clustertwin.validate.serving import request_of
    src = (DATA / "serving_runs_small.csv").read_text(encoding="utf-8").splitlines()
    row = dict(zip(src[0].split(","), src[1].split(",")))
    row["notes"] = "vllm serve --num-scheduler-steps 15; streaming (multi_step_stream=step): per-token itls"
    q = request_of(row, [])
    assert q.num_scheduler_steps == 15 and q.multi_step_stream == "step"


def test_harness_batcher_replays_amd_loop() -> None:
    """AMD's MLPerf harness batcher (sync_sut.py batch_samples_loop), by hand: threshold 0.3 s, batch 3, two
    engines. Arrivals 0, 0.1, 0.2 -> the third fills the batch at 0.2 (engine 0); 0.25 and 1.0: the loop wakes
    at 0.55 (timeout) but only 0.35 s have passed since the last send at 0.2 -> sends 0.25 at 0.55 (engine 1);
    1.0 is held and sent at once (0.45 s since 0.55 >= 0.3) to engine 0."""
    from clustertwin.serve.sim import harness_batches
    arr = np.array([0.0, 0.1, 0.2, 0.25, 1.0])
    when, where = harness_batches(arr, 0.3, 3, 2)
    assert when.tolist() == pytest.approx([0.2, 0.2, 0.2, 0.55, 1.0])
    assert where.tolist() == [0, 0, 0, 1, 0]
    assert (when >= arr).all()


def test_harness_batcher_delays_first_token_from_issue() -> None:
    q = dict(model="llama3-8b", gpu="h100-sxm", num_gpus=2, plan="tp=1,dp=2", input_len=256, output_len=64,
             request_rate=20, num_requests=300, seed=2)
    plain = predict_serving(ServeRequest(**q))
    held = predict_serving(ServeRequest(**q, harness_batcher=(0.3, 96)))
    # each query waits for its batch: on average about half the threshold more before its first token
    assert held.latency("ttft_s")["mean"] > plain.latency("ttft_s")["mean"] + 0.1
    assert (held.sim.ttft_s > 0).all() and (held.sim.start_s == plain.sim.start_s).all()
    assert held.requests_per_s == pytest.approx(plain.requests_per_s, rel=0.02)


def test_batcher_note_reaches_the_request() -> None:
    from clustertwin.validate.serving import request_of
    src = (DATA / "serving_runs_small.csv").read_text(encoding="utf-8").splitlines()
    row = dict(zip(src[0].split(","), src[1].split(",")))
    row["notes"] = ("mainVllmFp8_SyncServer.py --enable-batcher; --enable-batcher holds arriving queries up to "
                    "--batcher-threshold 0.3 s (or --gpu-batch-size 96) before sending them")
    assert request_of(row, []).harness_batcher == (0.3, 96)
    row["notes"] = "vllm serve"
    assert request_of(row, []).harness_batcher is None


def test_vllm_v0_pads_the_mla_latent_entry_on_cuda_only() -> None:
    """vLLM V0 on CUDA rounds DeepSeek's 576-value latent entry (1152 bytes) up to 256 bytes: 1280 bytes a token
    and layer, so the same memory holds 1152/1280 of the tokens; ROCm, V1 and GQA models are unpadded."""
    from clustertwin.serve.engines import engine_for_platform
    vllm = get_engine("vllm")
    assert engine_for_platform(vllm, "0.7.4.dev181+gf35f8e22", "nvidia")[0].mla_cache_align_bytes == 256
    assert engine_for_platform(vllm, "0.7.3", "amd")[0].mla_cache_align_bytes == 0
    assert engine_for_platform(vllm, "0.8.0", "nvidia")[0].mla_cache_align_bytes == 0
    ds = load_model("deepseek-v3")
    plain = setup("deepseek-v3", "h200", 8, tp=8, precision="fp8")
    padded = setup("deepseek-v3", "h200", 8, tp=8, precision="fp8", engine=vllm.with_overrides(mla_cache_align_bytes=256))
    assert plain.kv_alloc_bytes_per_token == plain.kv_bytes_per_token == 576 * 2 * ds.num_layers   # whole latent a rank
    assert padded.kv_alloc_bytes_per_token == 640 * 2 * ds.num_layers
    assert padded.kv_bytes_per_token == plain.kv_bytes_per_token          # the kernels read the unpadded part
    a, b = memory_plan(plain), memory_plan(padded)
    assert a.kv_cache_bytes == b.kv_cache_bytes
    assert b.kv_cache_tokens < a.kv_cache_tokens                          # padding never adds capacity
    assert abs(b.kv_cache_tokens / a.kv_cache_tokens - 1152 / 1280) < 1e-3
    gqa = setup("llama3-8b", "h100-sxm", 1, engine=vllm.with_overrides(mla_cache_align_bytes=256))
    assert gqa.kv_alloc_bytes_per_token == gqa.kv_bytes_per_token


def test_vllm_without_max_model_len_takes_the_models_native_context() -> None:
    """vllm serve of DeepSeek-R1 without --max-model-len runs max_model_len 163840 (its config's
    max_position_embeddings): V0 without chunked prefill then schedules (and profiles) 163840 tokens a step,
    which leaves less memory for the KV cache than an 8192-token budget; a given --max-model-len still wins."""
    from clustertwin.serve.run import build_setup
    q = ServeRequest(model="deepseek-v3", gpu="h200", num_gpus=8, plan="tp=8", engine="vllm",
                     engine_version="0.7.4", precision="fp8", input_len=3200, output_len=800, num_requests=2)
    s, notes = build_setup(q)
    assert s.engine.max_num_batched_tokens == 163840 and any("max_position_embeddings" in n for n in notes)
    given = build_setup(ServeRequest(**{**q.__dict__, "max_model_len": 32768}))[0]
    assert given.engine.max_num_batched_tokens == 32768
    assert memory_plan(s).kv_cache_tokens < memory_plan(given).kv_cache_tokens   # bigger profiling pass
    v1 = build_setup(ServeRequest(**{**q.__dict__, "engine_version": "0.8.0"}))[0]
    assert v1.engine.max_num_batched_tokens == get_engine("vllm").max_num_batched_tokens   # chunked: not sized


def test_less_memory_never_more_kv_capacity_and_a_full_cache_admits_nobody() -> None:
    eng = get_engine("vllm").with_overrides(chunked_prefill=False)
    caps = [memory_plan(setup("llama3-8b", "h100-sxm", 1, engine=eng.with_overrides(memory_fraction=f))).kv_cache_tokens
            for f in (0.5, 0.7, 0.9)]
    assert caps == sorted(caps)
    # a cache that holds two requests at a time: the third waits for one to finish, so at most two run at once
    s = setup("llama3-8b", "h100-sxm", 1, engine=eng)
    sim = Simulator(s, 2 * (1000 + 100) + 2 * 16)
    res = sim.run(make_requests(6, 1000, 100))
    assert res.max_running <= 2 and np.isfinite(res.finish_s).all()
    assert (np.sort(res.ttft_s)[2:] > np.sort(res.ttft_s)[:2].max()).all()


def test_vllm_07_keeps_the_absorbed_mla_matrices_beside_the_weights() -> None:
    """vLLM 0.7.x materializes W_Q_UK and W_UV_O (FP8 when the model is): (1536 + 7168) x 16 heads x 512 bytes a
    layer at tp 8, 4.35 GB a GPU more weight and so a smaller KV cache; 0.8 and GQA models are unchanged."""
    from clustertwin.serve.engines import engine_for_version
    vllm = get_engine("vllm")
    old = engine_for_version(vllm, "0.7.3", mla=True)[0]
    assert old.mla_absorbed_weights and not engine_for_version(vllm, "0.8.0", mla=True)[0].mla_absorbed_weights
    assert not engine_for_version(vllm, "0.7.3", mla=False)[0].mla_absorbed_weights
    ds = load_model("deepseek-v3")
    plain = setup("deepseek-v3", "h200", 8, tp=8, precision="fp8")
    kept = setup("deepseek-v3", "h200", 8, tp=8, precision="fp8", engine=vllm.with_overrides(mla_absorbed_weights=True))
    extra = ds.num_layers * 16 * 512 * (1536 + 7168) * 1.0
    assert kept.weight_bytes_per_gpu - plain.weight_bytes_per_gpu == pytest.approx(extra)
    assert memory_plan(kept).kv_cache_tokens < memory_plan(plain).kv_cache_tokens
    gqa = setup("llama3-8b", "h100-sxm", 1, engine=vllm.with_overrides(mla_absorbed_weights=True))
    assert gqa.weight_bytes_per_gpu == setup("llama3-8b", "h100-sxm", 1).weight_bytes_per_gpu


def test_vllm_profiling_pass_holds_the_fused_moe_buffers() -> None:
    """vLLM's Triton fused MoE holds (M, top-k, 2w), (M top-k, w) and (M, top-k, hidden) 16-bit buffers, M the
    tokens up to its 32768 chunk: for DeepSeek at tp 8 (w = 2048 / 8) that exceeds a dense layer's MLP, and the
    profiling peak grows with the tokens until the chunk, then by the per-token tensors only."""
    vllm = get_engine("vllm")
    s = setup("deepseek-v3", "h200", 8, tp=8, precision="fp8")
    m = s.model
    base = 3 * m.hidden_size + (s.heads_gpu + 2 * s.kv_heads_gpu) * m.qk_head_dim
    t = 32000
    moe = t * m.moe_top_k * (3 * m.expert_ffn / 8 + m.hidden_size) * 2
    assert moe > t * 3 * m.ffn_hidden_size / 8 * 2                      # the MoE buffers set the peak
    assert s.activation_bytes_per_gpu(t, 1024) == pytest.approx(t * base * 2 + moe + 1024 * m.vocab_size * 4)
    sizes = [s.activation_bytes_per_gpu(n, 256) for n in (1024, 8192, 32768, 65536, 163840)]
    assert sizes == sorted(sizes)                                        # more tokens never less memory
    generic = setup("deepseek-v3", "h200", 8, tp=8, precision="fp8", engine=vllm.with_overrides(fused_moe_chunk_tokens=0))
    assert generic.activation_bytes_per_gpu(t, 1024) < s.activation_bytes_per_gpu(t, 1024)
    dense = setup("llama3-8b", "h100-sxm", 1)                            # no MoE: the generic estimate
    assert dense.activation_bytes_per_gpu(t, 256) == setup(
        "llama3-8b", "h100-sxm", 1, engine=vllm.with_overrides(fused_moe_chunk_tokens=0)).activation_bytes_per_gpu(t, 256)
