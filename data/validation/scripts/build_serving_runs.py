"""Build data/validation/serving_runs.csv from verbatim transcriptions of published serving results.

Every figure in the output comes from a table transcribed as printed into data/validation/serving_sources/
(one file per source; the file's first line names it). This script only reshapes those tables into the
serving schema (shared/validation/SERVING.md: one measured metric per row) and adds what the source states
around the table (engine version, precision, number of requests, hardware). Nothing is computed from the
figures except unit changes (milliseconds -> seconds), which the notes say.

Re-run (from the repository root; standard library only, deterministic, CRLF like the other files here):
  python data/validation/scripts/build_serving_runs.py --out data/validation/serving_runs.csv
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

SOURCES_DIR = Path(__file__).resolve().parent.parent / "serving_sources"

COLUMNS = [
    "run_id", "source", "source_url", "model", "arch", "layers", "hidden", "heads", "kv_heads", "ffn_hidden",
    "vocab", "moe_experts", "moe_topk", "gpu", "num_gpus", "tp", "pp", "ep", "dp_replicas", "engine",
    "engine_version", "precision", "kv_cache_dtype", "workload", "input_len", "output_len", "dataset",
    "concurrency", "request_rate", "num_requests", "max_batch", "metric", "value", "notes",
]

# Model dimensions, copied from the catalog presets (src/clustertwin/catalog/models/<name>.yaml), which cite
# the papers and HF config.json files. For MoE models ffn_hidden is one expert's width, as in
# moe_public_runs.csv. Keys are the catalog names used in the `model` column.
MODELS: dict[str, dict[str, object]] = {
    "llama3-8b": dict(arch="llama", layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336,
                      vocab=128256),
    "llama3-70b": dict(arch="llama", layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672,
                       vocab=128256),
    "llama3.1-405b": dict(arch="llama", layers=126, hidden=16384, heads=128, kv_heads=8, ffn_hidden=53248,
                          vocab=128256),
    "llama2-70b": dict(arch="llama", layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672,
                       vocab=32000),
    "llama2-7b": dict(arch="llama", layers=32, hidden=4096, heads=32, kv_heads=32, ffn_hidden=11008,
                      vocab=32000),
    "llama2-13b": dict(arch="llama", layers=40, hidden=5120, heads=40, kv_heads=40, ffn_hidden=13824,
                       vocab=32000),
    "mistral-7b": dict(arch="llama", layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336,
                       vocab=32000),
    "mixtral-8x7b": dict(arch="mixtral", layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336,
                         vocab=32000, moe_experts=8, moe_topk=2),
    "mixtral-8x22b": dict(arch="mixtral", layers=56, hidden=6144, heads=48, kv_heads=8, ffn_hidden=16384,
                          vocab=32000, moe_experts=8, moe_topk=2),
    "qwen3-235b-a22b": dict(arch="qwen3_moe", layers=94, hidden=4096, heads=64, kv_heads=4, ffn_hidden=1536,
                            vocab=151936, moe_experts=128, moe_topk=8),
    "qwen3-30b-a3b": dict(arch="qwen3_moe", layers=48, hidden=2048, heads=32, kv_heads=4, ffn_hidden=768,
                          vocab=151936, moe_experts=128, moe_topk=8),
    "deepseek-v3": dict(arch="deepseek_v3", layers=61, hidden=7168, heads=128, kv_heads=128, ffn_hidden=2048,
                        vocab=129280, moe_experts=256, moe_topk=8),
}


def _num(text: str) -> str:
    """A figure as printed, without thousands separators or markdown bold."""
    return text.replace("*", "").replace(",", "").strip()


def _ms_to_s(text: str) -> str:
    """Milliseconds as printed -> seconds, exact in decimal (no float rounding)."""
    from decimal import Decimal
    value = Decimal(_num(text)) / Decimal(1000)
    return format(value.normalize(), "f")


def _cells(line: str) -> list[str]:
    """The cells of one markdown table line: one outer pipe removed at each end (empty cells kept)."""
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") else line
    return [c.strip() for c in line.split("|")]


def _pipe_rows(path: Path) -> list[list[str]]:
    """The cells of every markdown table row of a transcription file (header and rule rows included)."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line.startswith("|"):
            rows.append(_cells(line))
    return rows


def _row(run_id: str, model: str, metric: str, value: str, notes: str, **fields: object) -> dict[str, str]:
    out = {c: "" for c in COLUMNS}
    out.update({k: str(v) for k, v in MODELS[model].items()})
    out.update({k: ("" if v is None else str(v)) for k, v in fields.items()})
    out.update(run_id=run_id, model=model, metric=metric, value=value, notes=notes)
    unknown = set(out) - set(COLUMNS)
    if unknown:
        raise ValueError(f"unknown columns {sorted(unknown)}")
    return out


# --------------------------------------------------------------------------------------------------------
# TensorRT-LLM performance overview, release 0.17 (throughput table) and 0.14.0 (online serving table)
# --------------------------------------------------------------------------------------------------------
TRT017_COMMIT = "258c7540c03517def55d9a5aadfa9288af474e1b"
TRT017_URL = ("https://github.com/NVIDIA/TensorRT-LLM/blob/" + TRT017_COMMIT
              + "/docs/source/performance/perf-overview.md")
TRT017_SRC = ("NVIDIA TensorRT-LLM docs, Performance Overview (perf-overview.md, release 0.17), "
              "'Throughput Measurements' table")
TRT014_SRC = ("NVIDIA TensorRT-LLM docs, Performance Overview (perf-overview.md, release 0.17 page), "
              "'Online Serving Measurements' table (data generated with version 0.14.0)")
# "$num_requests" per input/output length, from the same page's "Preparing a Dataset" table.
TRT_NUM_REQUESTS = {(128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (2048, 128): 3000,
                    (2048, 2048): 1500, (5000, 500): 1500, (1000, 1000): 3000, (500, 2000): 3000,
                    (20000, 2000): 1000, (1000, 2000): 1500}
TRT017_MODELS = {"LLaMA v3.1 8B": "llama3-8b", "LLaMA v3.1 70B": "llama3-70b", "LLaMA v3.1 405B": "llama3.1-405b",
                 "Mistral 7B": "mistral-7b", "Mixtral 8x7B": "mixtral-8x7b", "Mixtral 8x22B": "mixtral-8x22b"}
# Table columns after model, TP and lengths: H200 141GB HBM3 (FP8), H100 80GB HBM3 (FP8), GH200 480GB (FP8),
# L40S (FP8), A100-SXM4-80GB (FP16). GH200 and L40S are not catalog GPUs: their cells are not used.
TRT017_GPUS = [("h200", "fp8"), ("h100-sxm", "fp8"), (None, "fp8"), (None, "fp8"), ("a100-80gb", "fp16")]
TRT017_COLUMN_NAMES = {"h200": "H200 141GB HBM3 FP8", "h100-sxm": "H100 80GB HBM3 FP8",
                       "a100-80gb": "A100-SXM4-80GB FP16"}


def trtllm_017_throughput() -> list[dict[str, str]]:
    rows = []
    model = tp = None
    for cells in _pipe_rows(SOURCES_DIR / "trtllm_v0.17_perf_overview_throughput.md"):
        if cells[0]:
            model = TRT017_MODELS[cells[0]]
        if cells[1]:
            tp = int(cells[1])
        isl, osl = (int(x) for x in cells[2].split(","))
        for (gpu, precision), cell in zip(TRT017_GPUS, cells[3:8]):
            if gpu is None or not cell:
                continue
            moe = "moe_experts" in MODELS[model]
            notes = (f"TensorRT-LLM 0.17 perf overview, Throughput Measurements table, column "
                     f"{TRT017_COLUMN_NAMES[gpu]}, TP {tp}, ISL/OSL {isl}/{osl}; value = 'token throughput in tokens/second' of the whole "
                     f"TP group = output tokens/s (the page's sample trtllm-bench output shows Token Throughput = "
                     f"Request Throughput x output length); trtllm-bench throughput, offline maximum-throughput "
                     f"scenario (all requests queued at once), synthetic token-norm-dist dataset with stdev 0 "
                     f"(every request exactly ISL in, OSL out); num_requests from the page's dataset table; "
                     f"engine built by trtllm-bench build from dataset statistics, so max batch size and max "
                     f"num tokens unknown; kv_cache_free_gpu_mem_fraction 0.95 in most cases (0.90 on OOM); "
                     f"{'FP8 quantization with FP8 KV cache (the page: FP8 quantization sets the KV cache to FP8)' if precision == 'fp8' else 'FP16 engine, no quantization'}"
                     f"{'; MoE expert-parallel layout not stated (TP only given)' if moe else ''}")
            rows.append(_row(
                f"trtllm0.17-{model}-{gpu}-tp{tp}-{isl}-{osl}", model, "output_tokens_per_s", _num(cell), notes,
                source=TRT017_SRC, source_url=TRT017_URL, gpu=gpu, num_gpus=tp, tp=tp, pp=1,
                dp_replicas=1, engine="trtllm", engine_version="0.17",
                precision=precision, kv_cache_dtype="fp8" if precision == "fp8" else "", workload="offline",
                input_len=isl, output_len=osl, num_requests=TRT_NUM_REQUESTS[(isl, osl)]))
    return rows


TRT014_MODELS = {"LLaMA 3.1 70B": "llama3-70b", "LLaMA 3.1 8B": "llama3-8b"}
TRT014_GPUS = {"H100 80GB HBM3": "h100-sxm", "H200 131GB HBM3": "h200"}


def trtllm_014_online() -> list[dict[str, str]]:
    rows = []
    model = gpu = tp = isl = osl = None
    gpu_text = model_text = ""
    for cells in _pipe_rows(SOURCES_DIR / "trtllm_v0.14_perf_overview_online.md"):
        if cells[0]:
            model_text = cells[0]
            model = TRT014_MODELS[model_text]
        if cells[1]:
            gpu_text = cells[1]
            gpu = TRT014_GPUS[gpu_text]
        if cells[2]:
            tp = int(cells[2])
        if cells[3]:
            isl = int(cells[3])
        if cells[4]:
            osl = int(cells[4])
        qps, req_tput, ttft_ms, itl_ms, total_tput, out_tput = cells[5:11]
        offline = qps == "INF"
        base = (f"TensorRT-LLM perf overview (0.17 page), Online Serving Measurements table: {model_text}, "
                f"{gpu_text}, TP {tp}, input {isl}, output {osl}, QPS {qps}; "
                f"TensorRT-LLM 0.14.0 served by the Triton TensorRT-LLM backend, 500 requests, BF16 "
                f"(page: 'All data in the table below was generated using version 0.14.0, with 500 requests "
                f"and BF16 precision'); ")
        if gpu_text.startswith("H200"):
            base += "the page prints 'H200 131GB HBM3' (the H200 has 141 GB); "
        if offline:
            base += "QPS INF = all requests issued at once (workload offline); "
        else:
            base += ("arrival process at the stated QPS not named on the page (Poisson assumed, as in the "
                     "serving benchmark clients); ")
        base += "max batch size, KV-cache fraction and engine build options not stated"
        run_id = f"trtllm0.14-online-{model}-{gpu}-tp{tp}-{isl}-{osl}-qps{qps.lower()}"
        fields = dict(source=TRT014_SRC, source_url=TRT017_URL, gpu=gpu, num_gpus=tp, tp=tp, pp=1,
                      dp_replicas=1, engine="trtllm", engine_version="0.14.0", precision="bf16",
                      workload="offline" if offline else "poisson", input_len=isl, output_len=osl,
                      request_rate="" if offline else qps, num_requests=500)
        rows.append(_row(run_id, model, "requests_per_s", _num(req_tput), base + "; Tput(req/s) column", **fields))
        rows.append(_row(run_id, model, "ttft_mean_s", _ms_to_s(ttft_ms),
                         base + "; Mean TTFT(ms) column, converted to seconds", **fields))
        rows.append(_row(run_id, model, "itl_mean_s", _ms_to_s(itl_ms),
                         base + "; Mean ITL(ms) column, converted to seconds", **fields))
        rows.append(_row(run_id, model, "total_tokens_per_s", _num(total_tput),
                         base + "; Total Token Tput (tok/s) column", **fields))
        rows.append(_row(run_id, model, "output_tokens_per_s", _num(out_tput),
                         base + "; Output Tput (tok/s) column", **fields))
    return rows


# --------------------------------------------------------------------------------------------------------
# SGLang v0.3.0 vs vLLM v0.6.0 (sgl-project/sglang benchmark/benchmark_vllm_060/README.md)
# --------------------------------------------------------------------------------------------------------
SGL060_COMMIT = "120affb9613cc3f5bcd055ec09c7621d3ced0ebc"
SGL060_URL = ("https://github.com/sgl-project/sglang/blob/" + SGL060_COMMIT
              + "/benchmark/benchmark_vllm_060/README.md")
SGL060_SRC = "SGLang team, benchmark/benchmark_vllm_060/README.md (SGLang v0.3.0 vs vLLM v0.6.0)"


def sglang_vs_vllm060() -> list[dict[str, str]]:
    rows = []
    heading = ""
    section = ""
    text = (SOURCES_DIR / "sglang_benchmark_vllm_060.md").read_text(encoding="utf-8")
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
            continue
        if line.startswith("### "):
            heading = line[4:].strip()
            continue
        if not line.startswith("|") or "---" in line or "Engine" in line:
            continue
        cells = _cells(line)
        if "8B" in heading:
            model, gpu, tp = "llama3-8b", "a100-80gb", 1
        else:
            model, gpu, tp = "llama3-70b", "h100-sxm", 4
        engine_name = cells[2]
        engine = {"SGLang": "sglang", "vLLM": "vllm"}[engine_name]
        version = {"sglang": "0.3.0", "vllm": "0.6.0"}[engine]
        launch = {
            ("sglang", 1): "SGLang server with --enable-torch-compile --disable-radix-cache",
            ("sglang", 4): "SGLang server with --disable-radix-cache --tp 4"
                           + (" --mem-frac 0.88" if section.startswith("Offline") else ""),
            ("vllm", 1): "vLLM OpenAI server with --num-scheduler-steps 10 --max_model_len 4096",
            ("vllm", 4): "vLLM OpenAI server with --num-scheduler-steps 10 --tensor 4 --max_model_len 4096",
        }[(engine, tp)]
        common = (f"{section}, {heading}, engine {engine_name}; {launch}; client sglang.bench_serving "
                  f"--dataset-name sharegpt (ShareGPT prompts and output lengths); BF16 weights (HF "
                  f"meta-llama/Llama-3.1-*-Instruct, no quantization flag)")
        run_base = f"sgl060-{engine}{version}-{model}-{gpu}-tp{tp}"
        fields = dict(source=SGL060_SRC, source_url=SGL060_URL, gpu=gpu, num_gpus=tp, tp=tp, pp=1,
                      dp_replicas=1, engine=engine, engine_version=version, precision="bf16",
                      dataset="sharegpt")
        if section.startswith("Online"):
            rps, nprompts, _eng, _e2e, ttft, tpot, _itl = cells
            fields.update(workload="poisson", request_rate=rps, num_requests=nprompts)
            notes = (common + f"; --request-rate {rps} (bench_serving draws Poisson arrivals at that rate), "
                     f"{nprompts} prompts")
            run_id = f"{run_base}-rps{rps}"
            rows.append(_row(run_id, model, "ttft_p50_s", _ms_to_s(ttft),
                             notes + "; Median TTFT column (ms), converted to seconds", **fields))
            rows.append(_row(run_id, model, "tpot_p50_s", _ms_to_s(tpot),
                             notes + "; Median TPOT column (ms), converted to seconds", **fields))
        else:
            _rps, nprompts, _eng, req_tput, out_tput = cells
            fields.update(workload="offline", num_requests=nprompts)
            notes = common + f"; request rate inf (all {nprompts} prompts sent at once)"
            run_id = f"{run_base}-offline"
            rows.append(_row(run_id, model, "requests_per_s", _num(req_tput),
                             notes + "; Request throughput column (req/s)", **fields))
            rows.append(_row(run_id, model, "output_tokens_per_s", _num(out_tput),
                             notes + "; Output token throughput column (tok/s)", **fields))
    return rows


BUILDERS = [trtllm_017_throughput, trtllm_014_online, sglang_vs_vllm060]


def build() -> list[dict[str, str]]:
    rows = [r for builder in BUILDERS for r in builder()]
    seen = set()
    for r in rows:
        key = (r["run_id"], r["metric"])
        if key in seen:
            raise ValueError(f"duplicate row {key}")
        seen.add(key)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="-", help="output CSV path (default: stdout)")
    args = parser.parse_args(argv)
    rows = build()
    if args.out == "-":
        writer = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\r\n")
        writer.writeheader()
        writer.writerows(rows)
    else:
        with open(args.out, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\r\n")
            writer.writeheader()
            writer.writerows(rows)
    print(f"{len(rows)} rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
