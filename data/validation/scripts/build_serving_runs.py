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
import re
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


# --------------------------------------------------------------------------------------------------------
# MLPerf Inference v4.1, closed division (mlcommons/inference_results_v4.1): LoadGen summaries
# --------------------------------------------------------------------------------------------------------
MLPERF41_COMMIT = "a2f5d66d17e8f75c02fd74dfe810ecca6a046696"
MLPERF41_BLOB = "https://github.com/mlcommons/inference_results_v4.1/blob/" + MLPERF41_COMMIT + "/"
MLPERF_LLAMA_DATASET = ("MLPerf llama2-70b data set: the 24,576 pre-tokenized OpenOrca GPT-4 samples "
                        "(open_orca_gpt4_tokenized_llama.sampled_24576, the file the harnesses load), variable "
                        "input and output lengths")
MLPERF_MIXTRAL_DATASET = ("MLPerf mixtral-8x7b data set: 15,000 samples, 5K each from the validation splits of "
                          "open_orca_gpt4, GSM8K and MBXP (mlcommons/inference language/mixtral-8x7b/README.md), "
                          "variable lengths")
# What the submission's own files say about each system (read from the same commit). NVIDIA: configs/<benchmark>/
# __init__.py (GPUBaseConfig: max_num_tokens), configs/<benchmark>/{Offline,Server}/__init__.py (per system), the
# engine build flags in code/<benchmark>/tensorrt/builder.py and the quantization command in its README.md;
# the harness (code/harness/harness_llm/llm_core.cc) builds the TRT-LLM executor's SchedulerConfig from the batch
# scheduler policy alone (its comment: "we can add context chunking policy later if needed"), so context chunking
# stays off, TRT-LLM's default (enable_chunked_context False). AMD: the perf scripts in
# code/llama2-70b-99.9/test_VllmFp8/ and the argparse/dataclass defaults of the mains they call.
NV_LLAMA_CFG = ("configs/llama2-70b/__init__.py GPUBaseConfig: max_num_tokens = 4096, passed to the engine build as "
                "--max_num_tokens=4096 (code/llama2-70b/tensorrt/builder.py, with --max_batch_size=<gpu_batch_size>, "
                "--max_input_len=1024, --paged_kv_cache=enable); code/llama2-70b/tensorrt/README.md quantizes with "
                "quantize.py --qformat fp8 --kv_cache_dtype fp8 (FP8 weights, activations and KV cache); context "
                "chunking not enabled by the harness (code/harness/harness_llm/llm_core.cc builds SchedulerConfig from "
                "the policy only): enable_chunked_context False, TRT-LLM's default; harness flag "
                "trtllm_batch_sched_policy default max_util and enable_trt_overlap default false (code/harness/"
                "harness_llm/main_llm.cc; neither set in the configs): a policy the twin does not model (it assumes "
                "GUARANTEED_NO_EVICT) and no overlap of the host's per-iteration work with the GPU")
NV_MIXTRAL_CFG = ("configs/mixtral-8x7b/__init__.py GPUBaseConfig max_num_tokens 16384; configs/mixtral-8x7b/"
                  "{Offline,Server}/__init__.py class H200_SXM_141GBx8 (from H200_SXM_141GBx1): tensor_parallelism 1 "
                  "(8 replicas), use_fp8 True, gpu_batch_size 3072 Offline / 1200 Server, max_num_tokens 16384 "
                  "Offline / 8192 Server, kvcache_free_gpu_mem_frac 0.90; code/mixtral-8x7b/tensorrt/builder.py "
                  "quantizes with --qformat=fp8 --kv_cache_dtype=fp8 and builds with "
                  "--max_num_tokens=<max_num_tokens>; "
                  "its harness.py runs the same harness_llm binary as llama2-70b, whose SchedulerConfig leaves "
                  "enable_chunked_context False (TRT-LLM's default)")
AMD_OFFLINE = ("perf script test_VllmFp8_Offline_perf.sh: mainVllmFp8_Offline.py -tp 1 -dp 8 --quantization fp8 "
               "--kv-cache-dtype fp8 --enforce-eager True --gpu-memory-utilization 0.99 --sorting descending; "
               "max_num_seqs 2048 and --max-num-batched-tokens 65536 from its DefaultEngineInput (not overridden); "
               "enable_chunked_prefill not set (commented out in DefaultEngineInput), so vLLM 0.4.3's default "
               "enable_chunked_prefill False")
AMD_SERVER = ("perf script test_VllmFp8_SyncServer_perf.sh: mainVllmFp8_SyncServer.py -tp 1 -dp 8 --quantization fp8 "
              "--kv-cache-dtype fp8 --enable-warm-up --enable-batcher; its argparse defaults, not overridden: "
              "--max-num-seqs 1024, --max-num-batched-tokens 49152, --gpu-memory-utilization 0.97, enforce_eager "
              "False (CUDA graphs); enable_chunked_prefill not set, so vLLM 0.4.3's default "
              "enable_chunked_prefill False; "
              "--enable-batcher "
              "holds arriving queries on the harness side up to --batcher-threshold 0.3 s (or --gpu-batch-size 96) "
              "before sending them to vLLM, each batch to the next vLLM engine in turn (sync_sut.py SyncServerSUT."
              "batch_samples_loop, send_samples, next_device_id: round-robin); LoadGen's TTFT counts from the "
              "query's issue, so the wait is in it")
MLPERF41_SYSTEMS = {
    "closed/NVIDIA/results/H200-SXM-141GBx8_TRT/llama2-70b": dict(
        model="llama2-70b", gpu="h200", num_gpus=8, tp=1, dp_replicas=8, engine="trtllm", precision="fp8",
        kv_cache_dtype="fp8", submitter="NVIDIA", status="available",
        max_batch={"Offline": 806, "Server": 896},
        how=("NVIDIA H200 (8x H200-SXM-141GB, TensorRT), TensorRT 10.2.0, CUDA 12.4 (systems/"
             "H200-SXM-141GBx8_TRT.json); TensorRT-LLM through NVIDIA's harness, version not stated; configs/"
             "llama2-70b/{Offline,Server}/__init__.py class H200_SXM_141GBx8 (from H200_SXM_141GBx1): "
             "tensor_parallelism 1 (so 8 independent replicas), use_fp8 True, gpu_batch_size 806 Offline / 896 "
             "Server (max_batch), kvcache_free_gpu_mem_frac 0.90; " + NV_LLAMA_CFG)),
    "closed/NVIDIA/results/DGX-H100_H100-SXM-80GBx8_TRT/llama2-70b": dict(
        model="llama2-70b", gpu="h100-sxm", num_gpus=8, tp=2, dp_replicas=4, engine="trtllm", precision="fp8",
        kv_cache_dtype="fp8", submitter="NVIDIA", status="available",
        max_batch={"Offline": 896, "Server": 1024},
        how=("DGX H100 (8x H100-SXM-80GB), TensorRT-LLM through NVIDIA's harness, version not stated; configs/"
             "llama2-70b/{Offline,Server}/__init__.py class H100_SXM_80GB_TP2x4: tensor_parallelism 2, "
             "pipeline_parallelism 1, 4 replicas, use_fp8 True, gpu_batch_size 896 Offline / 1024 Server "
             "(max_batch), kvcache_free_gpu_mem_frac 0.90; the 99.9%-accuracy logs are used (the index holds those; "
             "the HighAccuracy config class is the 99% class unchanged); " + NV_LLAMA_CFG)),
    "closed/NVIDIA/results/B200-SXM-180GBx1_TRT/llama2-70b": dict(
        model="llama2-70b", gpu="b200", num_gpus=1, tp=1, dp_replicas=1, engine="trtllm", precision="nvfp4",
        kv_cache_dtype="fp8", submitter="NVIDIA", status="preview",
        max_batch={},
        how=("NVIDIA B200 (1x B200-SXM-180GB, TensorRT), TGP 1000 W, status preview, TensorRT 10.1.0, CUDA 12.7, "
             "private git hashes of code and TRT-LLM (systems/B200-SXM-180GBx1_TRT.json); no B200 class in configs/"
             "llama2-70b, so batch size and max_num_tokens are unknown; precision: documentation/calibration.md "
             "('LLM submissions use FP8 or FP4 if the NVIDIA accelerator supports that feature'; for Llama2-70B 'On "
             "accelerators which support FP4 ... Selected linear and MLP layers* inputs and weights' and the KV cache "
             "are quantized, '*applied based on ModelOpt heuristic search'): B200 supports FP4, so precision nvfp4 "
             "(the twin prices every GEMM in NVFP4, while the submission quantized only the layers ModelOpt "
             "selected, the rest FP8: an upper bound on speed) and kv_cache_dtype fp8 (the FP8 list's KV-cache "
             "entries; whether B200 kept them in FP4 is not stated); the Server figures are from the 99.9%-accuracy "
             "log, the Offline ones from the 99% log")),
    "closed/NVIDIA/results/H200-SXM-141GBx8_TRT/mixtral-8x7b": dict(
        model="mixtral-8x7b", gpu="h200", num_gpus=8, tp=1, dp_replicas=8, engine="trtllm", precision="fp8",
        kv_cache_dtype="fp8", submitter="NVIDIA", status="available",
        max_batch={"Offline": 3072, "Server": 1200},
        max_num_tokens={"Offline": 16384, "Server": 8192},
        how=("NVIDIA H200 (8x H200-SXM-141GB, TensorRT), TensorRT 10.2.0, CUDA 12.4; " + NV_MIXTRAL_CFG)),
    "closed/AMD/results/8xMI300X_2xEPYC-9374F/llama2-70b": dict(
        model="llama2-70b", gpu="mi300x", num_gpus=8, tp=1, dp_replicas=8, engine="vllm",
        engine_version="0.4.3+rocm614", precision="fp8", kv_cache_dtype="fp8",
        submitter="AMD", status="available", max_batch={"Offline": 2048, "Server": 1024},
        how=("Supermicro AS-8125GS-TNMR2, 8x AMD Instinct MI300X-NPS1-SPX-192GB-750W, 2x EPYC 9374F; framework "
             "'vLLM 0.4.3+rocm614, PyTorch 2.3.0, ROCm 6.1.2' (systems/8xMI300X_2xEPYC-9374F.json); AMD's "
             "harness (code/llama2-70b-99.9/test_VllmFp8) runs TP=1, DP=8, --quantization fp8 "
             "(Quark w_fp8_a_fp8_o_fp8), --kv-cache-dtype fp8")),
    "closed/AMD/results/8xMI300X_2xEPYC-TURIN/llama2-70b": dict(
        model="llama2-70b", gpu="mi300x", num_gpus=8, tp=1, dp_replicas=8, engine="vllm",
        engine_version="0.4.3+rocm614", precision="fp8", kv_cache_dtype="fp8",
        submitter="AMD", status="preview", max_batch={"Offline": 2048, "Server": 1024},
        how=("Supermicro AS-8125GS-TNMR2, 8x AMD Instinct MI300X-NPS1-SPX-192GB-750W, 2x next-generation EPYC "
             "'TURIN' (status preview because of the CPU); framework 'vLLM 0.4.3+rocm614, PyTorch 2.3.0, "
             "ROCm 6.1.2'; harness TP=1, DP=8, FP8 weights and activations, FP8 KV cache")),
    "closed/AMD/results/1xMI300X_2xEPYC-9374F/llama2-70b": dict(
        model="llama2-70b", gpu="mi300x", num_gpus=1, tp=1, dp_replicas=1, engine="vllm",
        engine_version="0.4.3+rocm614", precision="fp8", kv_cache_dtype="fp8",
        submitter="AMD", status="available", max_batch={"Offline": 2048, "Server": 1024},
        how=("1x AMD Instinct MI300X 192GB, 2x EPYC 9374F, vLLM 0.4.3+rocm614; harness TP=1 (-dp 1 on one GPU), "
             "FP8 weights and activations, FP8 KV cache; the 99.9%-accuracy logs (the index holds those for this "
             "system; AMD ran the same FP8 model for both accuracy targets)")),
}


def _mlperf_blocks(path: Path) -> list[tuple[str, dict[str, str]]]:
    blocks: list[tuple[str, dict[str, str]]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("### "):
            blocks.append((line[4:].strip(), {}))
        elif ":" in line and blocks and not line.startswith("<!--"):
            key, value = line.split(":", 1)
            blocks[-1][1][key.strip()] = value.strip()
    return blocks


def _ns_to_s(text: str) -> str:
    from decimal import Decimal
    return format((Decimal(text) / Decimal(10**9)).normalize(), "f")


def mlperf_inference_v41() -> list[dict[str, str]]:
    rows = []
    for path, stats in _mlperf_blocks(SOURCES_DIR / "mlperf_inference_v4.1.md"):
        key = next(k for k in MLPERF41_SYSTEMS if path.startswith(k))
        meta = MLPERF41_SYSTEMS[key]
        scenario = stats["Scenario"]
        assert stats["Result is"] == "VALID", path
        model = meta["model"]
        dataset = MLPERF_LLAMA_DATASET if model == "llama2-70b" else MLPERF_MIXTRAL_DATASET
        system = path.split("/")[3]
        bench = path.split("/")[4]
        run_id = f"mlperf4.1-{meta['submitter'].lower()}-{system}-{bench}-{scenario.lower()}"
        fields = dict(source=f"MLPerf Inference v4.1 Datacenter, closed division, submitter {meta['submitter']}, "
                             f"system {system}, benchmark {bench}, scenario {scenario} (status {meta['status']})",
                      source_url=MLPERF41_BLOB + path, gpu=meta["gpu"], num_gpus=meta["num_gpus"], tp=meta["tp"],
                      pp=1 if meta["tp"] != "" else "", dp_replicas=meta["dp_replicas"], engine=meta["engine"],
                      engine_version=meta.get("engine_version", ""), precision=meta["precision"],
                      kv_cache_dtype=meta.get("kv_cache_dtype", ""),
                      dataset="openorca" if model == "llama2-70b" else "mlperf-mixtral",
                      max_batch=meta["max_batch"].get(scenario, ""))
        base = (f"MLPerf LoadGen mlperf_log_summary.txt ({path}); {meta['how']}; {dataset}; "
                f"performance_sample_count {stats['performance_sample_count']}; ")
        if meta["submitter"] == "AMD":
            base += (AMD_OFFLINE if scenario == "Offline" else AMD_SERVER) + "; "
        if "max_num_tokens" in meta:
            base += (f"{scenario} engine built with --max_num_tokens={meta['max_num_tokens'][scenario]} (the "
                     f"scenario config's max_num_tokens); ")
        if scenario == "Offline":
            fields.update(workload="offline", num_requests=stats["samples_per_query"])
            base += (f"Offline scenario: one query of samples_per_query {stats['samples_per_query']} samples issued "
                     f"at once (target_qps {stats['target_qps']} only sizes the query)")
            rows.append(_row(run_id, model, "output_tokens_per_s", stats["Tokens per second"],
                             base + "; 'Tokens per second' (output tokens, whole system)", **fields))
            rows.append(_row(run_id, model, "requests_per_s", stats["Samples per second"],
                             base + "; 'Samples per second'", **fields))
        else:
            rate, dur = stats["Scheduled samples per second"], int(stats["min_duration (ms)"]) // 1000
            n = round(float(rate) * dur)
            fields.update(workload="poisson", request_rate=stats["target_qps"], num_requests=n)
            base += (f"Server scenario: LoadGen issues single-sample queries with Poisson arrivals at target_qps "
                     f"{stats['target_qps']} (scheduled {rate}/s), for at least {dur} s; num_requests {n} = "
                     f"scheduled rate x minimum duration, a lower bound of the queries LoadGen issued (their count "
                     f"is not in the summary); "
                     f"latency constraints TTFT p99 <= 2 s, TPOT p99 <= 200 ms, met (VALID)")
            rows.append(_row(run_id, model, "output_tokens_per_s", stats["Completed tokens per second"],
                             base + "; 'Completed tokens per second' (output tokens, whole system)", **fields))
            rows.append(_row(run_id, model, "requests_per_s", stats["Completed samples per second"],
                             base + "; 'Completed samples per second'", **fields))
            for metric, label in [("e2e_latency_mean_s", "Mean latency (ns)"),
                                  ("ttft_mean_s", "Mean First Token latency (ns)"),
                                  ("ttft_p50_s", "50.00 percentile first token latency (ns)"),
                                  ("tpot_mean_s", "Mean Time to Output Token (ns)"),
                                  ("tpot_p50_s", "50.00 percentile time to output token (ns)")]:
                rows.append(_row(run_id, model, metric, _ns_to_s(stats[label]),
                                 base + f"; '{label}' converted to seconds (LoadGen's time to output token is "
                                        f"per sample (latency - TTFT) / (output tokens - 1), the schema's TPOT)",
                                 **fields))
    return rows


# --------------------------------------------------------------------------------------------------------
# TensorRT-LLM performance overview, release 1.0 page (PyTorch backend, FP8 and FP4 checkpoints)
# --------------------------------------------------------------------------------------------------------
TRT10_COMMIT = "00f37686aa854010d68bcbd0f4ab000221541ca6"
TRT10_URL = ("https://github.com/NVIDIA/TensorRT-LLM/blob/" + TRT10_COMMIT
             + "/docs/source/performance/perf-overview.md")
TRT10_SRC = ("NVIDIA TensorRT-LLM docs, Performance Overview (perf-overview.md, release 1.0 page), "
             "'Throughput Measurements' tables")
TRT10_MODELS = {"Llama 3.3 70B": ("llama3-70b", "nvidia/Llama-3.3-70B-Instruct-FP4 / -FP8"),
                "Qwen3-235B-A22B": ("qwen3-235b-a22b", "nvidia/Qwen3-235B-A22B-FP4 / -FP8"),
                "Qwen3-30B-A3B": ("qwen3-30b-a3b", "nvidia/Qwen3-30B-A3B-FP4"),
                "Llama 3.1 405B": ("llama3.1-405b", "nvidia/Llama-3.1-405B-Instruct-FP4 / -FP8"),
                "Llama 3.1 8B": ("llama3-8b", "nvidia/Llama-3.1-8B-Instruct-FP8")}
TRT10_GPUS = {"B200": "b200", "H200": "h200", "H100": "h100-sxm", "GB200": None}


def trtllm_10_throughput() -> list[dict[str, str]]:
    rows = []
    model = checkpoints = None
    columns: list[tuple[str | None, int, str, str]] = []
    for line in (SOURCES_DIR / "trtllm_v1.0_perf_overview_throughput.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("#### "):
            model, checkpoints = TRT10_MODELS[line[5:].strip()]
            continue
        if not line.startswith("|") or line.startswith("|---"):
            continue
        cells = _cells(line)
        if cells[0].startswith("Sequence Length"):
            columns = []
            for head in cells[1:]:
                gpu_text, rest = head.split("<br/>")
                tp_text, prec_text = rest.split(" ")
                columns.append((TRT10_GPUS[gpu_text], int(tp_text[2:]), prec_text.strip("()"), head))
            continue
        isl, osl = (int(x) for x in cells[0].split("/"))
        for (gpu, tp, prec, head), cell in zip(columns, cells[1:]):
            if gpu is None or not cell:
                continue
            moe = "moe_experts" in MODELS[model]
            precision = {"FP4": "nvfp4", "FP8": "fp8"}[prec]
            notes = (f"TensorRT-LLM 1.0 perf overview, table of "
                     f"{[k for k, v in TRT10_MODELS.items() if v[0] == model][0]}, column "
                     f"'{head.replace('<br/>', ' ')}', ISL/OSL {isl}/{osl}; value = 'Total Output Throughput "
                     f"(tokens/sec)' of the whole TP group (the page: 'The reported metric is Total Output "
                     f"Throughput'); trtllm-bench throughput with the PyTorch backend, offline maximum-throughput "
                     f"scenario (requests queued in rapid succession), synthetic dataset with stdev 0 (every "
                     f"request exactly ISL in, OSL out), num_requests from the page's dataset table; NVIDIA "
                     f"ModelOpt checkpoints {checkpoints} ({prec}; FP4 = NVFP4); CUDA graphs with padding, batch "
                     f"sizes up to 8192 captured; kv_cache_free_gpu_mem_fraction 0.95 in many cases (0.90 or lower "
                     f"on OOM); KV-cache dtype not stated (the checkpoint's default); max batch size and max num "
                     f"tokens not stated"
                     + ("; MoE run with trtllm-bench --tp/--ep and attention data parallelism enabled "
                        "(enable_attention_dp), ep size not stated" if moe else ""))
            rows.append(_row(
                f"trtllm1.0-{model}-{gpu}-tp{tp}-{precision}-{isl}-{osl}", model, "output_tokens_per_s",
                _num(cell), notes, source=TRT10_SRC, source_url=TRT10_URL, gpu=gpu, num_gpus=tp, tp=tp, pp=1,
                dp_replicas=1, engine="trtllm", engine_version="1.0", precision=precision, workload="offline",
                input_len=isl, output_len=osl, num_requests=TRT_NUM_REQUESTS[(isl, osl)]))
    return rows


# --------------------------------------------------------------------------------------------------------
# AMD's ROCm vLLM image on MI300X (ROCm/vllm docs/dev-docker/README.md): offline throughput, static latency
# --------------------------------------------------------------------------------------------------------
ROCM_COMMIT = "040de12d45c16d6de6ad386cc57dd68b8c5b805e"
ROCM_URL = "https://github.com/ROCm/vllm/blob/" + ROCM_COMMIT + "/docs/dev-docker/README.md"
ROCM_SRC = ("AMD, ROCm/vllm docs/dev-docker/README.md ('vllm FP8 Latency and Throughput benchmarks with vLLM on "
            "the AMD Instinct MI300X accelerator', image rocm6.4.1_vllm_0.10.0_20250812), Performance Results")
ROCM_MODELS = {"Llama 3.1 70B (amd/Llama-3.1-70B-Instruct-FP8-KV)": "llama3-70b",
               "Llama 3.1 405B (amd/Llama-3.1-405B-Instruct-FP8-KV)": "llama3.1-405b"}
ROCM_HOST = ("Supermicro AS-8125GS-TNMR2, 2x AMD EPYC 9554, 8x AMD Instinct MI300X (192GiB, 750W), amdgpu "
             "driver 6.8.5; image with ROCm 6.4.1, vLLM v0.10.0, PyTorch 2.7; the page: 'Benchmarks were run "
             "with benchmark scripts from v0.8.5'; checkpoint {ckpt} (Quark FP8 weights and activations, FP8 "
             "KV-cache scales)")


def rocm_vllm_mi300x() -> list[dict[str, str]]:
    rows = []
    section = model = ckpt = None
    for line in (SOURCES_DIR / "rocm_vllm_dev_docker_mi300x.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("### "):
            section = line[4:].strip()
            continue
        if not line.startswith("|") or line.startswith("|---") or line.startswith("| Model"):
            continue
        cells = _cells(line)
        if cells[0]:
            model = ROCM_MODELS[cells[0]]
            ckpt = cells[0].split("(")[1].rstrip(")")
        host = ROCM_HOST.format(ckpt=ckpt)
        fields = dict(source=ROCM_SRC, source_url=ROCM_URL, gpu="mi300x", num_gpus=8, tp=8, pp=1, dp_replicas=1,
                      engine="vllm", engine_version="0.10.0", precision="fp8")
        if section == "Throughput Measurements":
            isl, osl, prompts, max_seqs, value = (_num(c) for c in cells[3:8])
            notes = (f"Throughput Measurements table, {ckpt}, TP 8, input {isl}, "
                     f"output {osl}, {prompts} prompts, max-num-seqs {max_seqs}; {host}; "
                     f"benchmark_throughput.py (offline, all prompts at once, random prompts of exactly the "
                     f"lengths) with --kv-cache-dtype fp8 --dtype float16 --max-model-len 8192 "
                     f"--max-num-batched-tokens 131072 --gpu-memory-utilization 0.9; the table's 'Throughput "
                     f"(tokens/s)' does not say which of the script's total or output tokens/s it is: read as "
                     f"output tokens/s because its ratio between the 128/2048 and 2048/2048 rows (1.77 for 70B, "
                     f"1.78 for 405B) is that of output-token throughput in the other sources (TensorRT-LLM's "
                     f"H200 TP8 tables: 1.8-2.0), where total tokens/s would give 3.3")
            rows.append(_row(f"rocm-vllm0.10-{model}-mi300x-tp8-{isl}-{osl}-offline", model, "output_tokens_per_s",
                             value, notes, workload="offline", input_len=isl, output_len=osl, kv_cache_dtype="fp8",
                             num_requests=prompts, max_batch=max_seqs, **fields))
        else:
            batch, isl, osl, value = (_num(c) for c in cells[3:7])
            notes = (f"Latency Measurements table, TP 8, batch size {batch}, input {isl}, output {osl}, "
                     f"'MI300X Latency (sec)'; {host}; benchmark_latency.py: one batch of {batch} identical "
                     f"random prompts prefilled and decoded together (workload static), mean over 5 iterations "
                     f"after 3 warm-up ones, --dtype float16 --gpu-memory-utilization 0.9; the latency command "
                     f"does not pass --kv-cache-dtype fp8, so the KV cache is the engine default")
            rows.append(_row(f"rocm-vllm0.10-{model}-mi300x-tp8-bs{batch}-{isl}-{osl}-static", model,
                             "e2e_latency_mean_s", value, notes, workload="static", input_len=isl, output_len=osl,
                             max_batch=batch, **fields))
    return rows


# --------------------------------------------------------------------------------------------------------
# TensorRT-LLM static-batch figures (gptSessionBenchmark era): performance.md (v0.6.1 / v0.5) and the H200
# launch blog (v0.5)
# --------------------------------------------------------------------------------------------------------
TRT06_COMMIT = "138f96d45f90b9667426f7c47297d8c06bafac73"
TRT06_URL = "https://github.com/NVIDIA/TensorRT-LLM/blob/" + TRT06_COMMIT + "/docs/source/performance.md"
TRT06_SRC = "NVIDIA TensorRT-LLM docs, 'Performance of TensorRT-LLM' (docs/source/performance.md, v0.6.1 / v0.5 data)"
H200_COMMIT = "1555478c1b417a0b34de05209862ea5a2ab9add1"
H200_URL = "https://github.com/NVIDIA/TensorRT-LLM/blob/" + H200_COMMIT + "/docs/source/blogs/H200launch.md"
H200_SRC = ("NVIDIA TensorRT-LLM blog 'H200 achieves nearly 12,000 tokens/sec on Llama2-13B with TensorRT-LLM' "
            "(docs/source/blogs/H200launch.md), table 'H200 FP8 Max throughput'")
TRT_STATIC_MODELS = {"LLaMA 7B": "llama2-7b", "LLaMA 70B": "llama2-70b", "llama_13b": "llama2-13b",
                     "llama_70b": "llama2-70b"}
STATIC_METHOD = ("static batching: gptSessionBenchmark runs one batch of `Batch Size` identical requests "
                 "(prefill, then decode together; the page's reproduction commands), so workload static with "
                 "max_batch = the batch size; the Llama models are Llama 2 (the page builds Llama2-7b and "
                 "Llama2-70b engines)")


def trtllm_static() -> list[dict[str, str]]:
    rows = []
    section = gpu_heading = version = ""
    for line in (SOURCES_DIR / "trtllm_v0.6_performance_static.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
            version = "0.6.1" if section == "Peak Throughput" else "0.5"
            continue
        if line.startswith("### "):
            gpu_heading = line[4:].strip()
            continue
        if not line.startswith("|") or line.startswith("| :") or line.startswith("| Model"):
            continue
        cells = _cells(line)
        model = TRT_STATIC_MODELS[cells[0]]
        batch, tp = int(cells[1]), int(cells[2])
        h100 = gpu_heading.startswith("H100")
        gpu, precision = ("h100-sxm", "fp8") if h100 else ("a100-80gb", "fp16")
        fields = dict(source=TRT06_SRC, source_url=TRT06_URL, gpu=gpu, num_gpus=tp, tp=tp, pp=1, dp_replicas=1,
                      engine="trtllm", engine_version=version, precision=precision,
                      kv_cache_dtype="fp8" if h100 else "fp16", workload="static", max_batch=batch)
        build = ("engines built with --enable_fp8 --fp8_kv_cache (FP8 weights/compute and KV cache)" if h100 else
                 "A100: the FP8 options removed from the build (FP16 weights and KV cache)")
        if section == "Peak Throughput":
            isl, osl, value = int(cells[3]), int(cells[4]), _num(cells[5])
            per_gpu = "/GPU" in line or h100
            if not per_gpu and tp > 1:
                # The A100 table's header says 'out tok/s' where the H100 one says 'out tok/s/GPU': whether a
                # TP>1 A100 figure is per GPU or per TP group is ambiguous, so those rows are not used.
                continue
            notes = (f"Peak Throughput, {gpu_heading} table (data of v0.6.1), {cells[0]}, batch {batch}, TP {tp}, "
                     f"ISL/OSL {isl}/{osl}; {STATIC_METHOD}; {build}; column "
                     f"{'Throughput (out tok/s/GPU)' if h100 else 'Throughput (out tok/s), TP 1 so also per GPU'}")
            rows.append(_row(f"trtllm{version}-static-{model}-{gpu}-tp{tp}-bs{batch}-{isl}-{osl}", model,
                             "output_tokens_per_s_per_gpu", value, notes, input_len=isl, output_len=osl,
                             **fields))
        else:
            isl = int(cells[3])
            notes = (f"Low Latency, {gpu_heading} table (data of v0.5), {cells[0]}, batch 1, TP {tp}, input {isl}, "
                     f"'1st Token Latency (ms)' converted to seconds; measured by running the engine with a single "
                     f"output token (the page's 'Reproducing First Token Latency'), so output_len 1 and TTFT = the "
                     f"whole request; {build}; printed to whole milliseconds")
            rows.append(_row(f"trtllm{version}-static-{model}-{gpu}-tp{tp}-bs1-{isl}-1", model, "ttft_mean_s",
                             _ms_to_s(cells[4]), notes, input_len=isl, output_len=1, **fields))
    for cells in _pipe_rows(SOURCES_DIR / "trtllm_blog_h200launch.md"):
        if cells[0].startswith(":") or cells[0].startswith("Model"):
            continue
        model = TRT_STATIC_MODELS[cells[0]]
        batch, tp, isl, osl, value = int(cells[1]), int(cells[2]), int(cells[3]), int(cells[4]), _num(cells[5])
        notes = (f"H200 FP8 Max throughput table, {cells[0]} (Llama 2, the blog's title names Llama2-13B), batch "
                 f"{batch} (the largest power of 2 that fits), TP {tp}, ISL/OSL {isl}/{osl}, 'Throughput (out "
                 f"tok/s/GPU)'; TensorRT-LLM v0.5.0, TensorRT 9.1.0.4, FP8, 'preliminary measured performance'; "
                 f"v0.5 benchmarks ran static batches (gptSessionBenchmark): workload static, max_batch = batch; "
                 f"KV-cache dtype not stated")
        rows.append(_row(f"trtllm0.5-h200blog-{model}-h200-tp{tp}-bs{batch}-{isl}-{osl}", model,
                         "output_tokens_per_s_per_gpu", value, notes, source=H200_SRC, source_url=H200_URL,
                         gpu="h200", num_gpus=tp, tp=tp, pp=1, dp_replicas=1, engine="trtllm", engine_version="0.5.0",
                         precision="fp8", workload="static", input_len=isl, output_len=osl, max_batch=batch))
    return rows


# --------------------------------------------------------------------------------------------------------
# TensorRT-LLM DeepSeek-R1 best-practice blog: closed-loop (concurrency) max-throughput runs on B200 and H200
# --------------------------------------------------------------------------------------------------------
DSR1_COMMIT = "01c4ece911eb569e72cf4177f83238a0520641c2"
DSR1_URL = ("https://github.com/NVIDIA/TensorRT-LLM/blob/" + DSR1_COMMIT
            + "/docs/source/blogs/Best_perf_practice_on_DeepSeek-R1_in_TensorRT-LLM.md")
DSR1_SRC = "NVIDIA TensorRT-LLM blog 'How to get best performance on DeepSeek-R1 in TensorRT LLM'"
DSR1_RUNS = {
    "B200 max-throughput for R1 with FP16 KV cache": dict(
        gpu="b200", precision="nvfp4", kv_cache_dtype="bf16", concurrency=3072, num_requests=49152, max_batch=384,
        what=("nvidia/DeepSeek-R1-FP4 (NVFP4 weights); the heading says 'FP16 KV cache', the page elsewhere "
              "compares FP8 KV with 'BF16 KV cache', so the 16-bit KV cache is read as bf16; reproduced with "
              "TensorRT LLM commit b6261862419c33d6ce2313aff1e7116067d6037d; --max_batch_size 384 (per rank) "
              "--max_num_tokens 1536 --kv_cache_free_gpu_mem_fraction 0.85")),
    "H200 max-throughput": dict(
        gpu="h200", precision="fp8", kv_cache_dtype="", concurrency=1024, num_requests=5120, max_batch=128,
        what=("deepseek-ai/DeepSeek-R1 (its native FP8 block-scaled weights); KV-cache dtype not stated; "
              "TensorRT-LLM version not stated; the text says the 5,120 requests are 'from real dataset' but "
              "the page's command generates a synthetic 1024/2048 dataset with stdev 0, which is what the rows "
              "assume; CUDA graphs for batch 128; --max_batch_size 128 (per rank) --max_num_tokens 1151 "
              "--kv_cache_free_gpu_mem_fraction 0.8")),
}
DSR1_METRICS = [("requests_per_s", "Request Throughput (req/sec)", None),
                ("output_tokens_per_s", "Total Output Throughput (tokens/sec)", None),
                ("total_tokens_per_s", "Total Token Throughput (tokens/sec)", None),
                ("output_tokens_per_s_per_gpu", "Per GPU Output Throughput (tps/gpu)", None),
                ("output_tokens_per_s_per_gpu", "Per GPU Output Throughput (tokens/sec/gpu)", None),
                ("e2e_latency_mean_s", "Average request latency (ms)", "ms")]


def trtllm_deepseek_r1() -> list[dict[str, str]]:
    rows = []
    blocks: list[tuple[str, dict[str, str]]] = []
    for line in (SOURCES_DIR / "trtllm_blog_deepseek_r1_best_perf.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("### "):
            blocks.append((line[4:].strip(), {}))
        elif blocks and ":" in line and "(" in line.split(":")[0]:
            key, value = line.split(":", 1)
            blocks[-1][1][key.strip()] = value.strip()
    for heading, stats in blocks:
        run = DSR1_RUNS[heading]
        run_id = f"trtllm-dsr1blog-deepseek-v3-{run['gpu']}-tp8-ep8-c{run['concurrency']}-1024-2048"
        base = (f"DeepSeek-R1 (the catalog's deepseek-v3 dimensions: same architecture), section '{heading}', "
                f"'Expected Result Format' output of trtllm-bench throughput (the page: 'the perf might be "
                f"different from different datasets and machines'); --tp 8 --ep 8 with enable_attention_dp "
                f"(attention data-parallel over the 8 GPUs, each rank its own batch; MoE expert-parallel 8); "
                f"--concurrency {run['concurrency']} (closed loop) --num_requests {run['num_requests']}; "
                f"synthetic token-norm-dist dataset 1024 in / 2048 out, stdev 0; {run['what']}")
        fields = dict(source=f"{DSR1_SRC}, section '{heading}'", source_url=DSR1_URL, gpu=run["gpu"], num_gpus=8,
                      tp=8, pp=1, ep=8, dp_replicas=1, engine="trtllm", precision=run["precision"],
                      kv_cache_dtype=run["kv_cache_dtype"], workload="concurrency", input_len=1024,
                      output_len=2048, concurrency=run["concurrency"], num_requests=run["num_requests"],
                      max_batch=run["max_batch"])
        for metric, label, unit in DSR1_METRICS:
            if label not in stats:
                continue
            value = _ms_to_s(stats[label]) if unit == "ms" else _num(stats[label])
            note = base + f"; '{label}'" + (" converted to seconds" if unit == "ms" else "")
            rows.append(_row(run_id, "deepseek-v3", metric, value, note, **fields))
    return rows


# --------------------------------------------------------------------------------------------------------
# SGLang v0.4.1, DeepSeek-V3 on 8xH200 (sgl-project/sglang benchmark/benchmark_dsv3/README.md, DataCrunch)
# --------------------------------------------------------------------------------------------------------
DSV3_COMMIT = "26db155e335cd6e00d6f1ec161a3fc4c65dae4c0"
DSV3_URL = "https://github.com/sgl-project/sglang/blob/" + DSV3_COMMIT + "/benchmark/benchmark_dsv3/README.md"
DSV3_SRC = ("SGLang repository, benchmark/benchmark_dsv3/README.md ('Benchmark for SGLang v0.4.1 - DeepSeek v3 on "
            "Different H200 configurations', measured by DataCrunch, logs in datacrunch-research/h200-benchmarks)")


def sglang_dsv3_h200() -> list[dict[str, str]]:
    rows = []
    variant = launch = ""
    for line in (SOURCES_DIR / "sglang_benchmark_dsv3_h200.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("### "):
            variant = line[4:].strip()
            continue
        if line.startswith("launch: "):
            launch = line[len("launch: "):]
            continue
        if not line.startswith("|") or line.startswith("| ---") or line.startswith("| RPS"):
            continue
        rps, prompts, _e2e, ttft, tpot, _itl, out_tput = _cells(line)
        fp8 = variant == "FP8"
        precision_note = (
            "--quantization fp8 --kv-cache-dtype fp8_e5m2: FP8 weights and an FP8 (e5m2) KV cache" if fp8 else
            "the page labels this run BF16, but it launches deepseek-ai/DeepSeek-V3 (whose published weights are "
            "FP8 block-quantized) with no dtype or quantization flag: weight precision left unknown, KV cache at "
            "the engine default")
        notes = (f"DeepSeek V3 on 8xH200 (single-node), {variant} table, RPS {rps}, {prompts} prompts; SGLang v0.4.1 "
                 f"(lmsysorg/sglang docker image); launch: {launch}; --tp 8 with --enable-dp-attention "
                 f"(attention data-parallel, MoE over the 8 GPUs); {precision_note}; client sglang.bench_serving "
                 f"--dataset-name random --random-range-ratio 1 --random-input 1024 --random-output 1024 "
                 f"(every request 1024 in, 1024 out) --request-rate {rps} (Poisson arrivals)")
        fields = dict(source=DSV3_SRC, source_url=DSV3_URL, gpu="h200", num_gpus=8, tp=8, pp=1, dp_replicas=1,
                      engine="sglang", engine_version="0.4.1", precision="fp8" if fp8 else "",
                      kv_cache_dtype="fp8" if fp8 else "", workload="poisson", input_len=1024, output_len=1024,
                      request_rate=rps, num_requests=prompts)
        run_id = f"sgl0.4.1-dsv3-deepseek-v3-h200-tp8-{variant.lower()}-rps{rps}"
        rows.append(_row(run_id, "deepseek-v3", "ttft_p50_s", _ms_to_s(ttft),
                         notes + "; Median TTFT (ms) converted to seconds", **fields))
        rows.append(_row(run_id, "deepseek-v3", "tpot_p50_s", _ms_to_s(tpot),
                         notes + "; Median TPOT (ms) converted to seconds", **fields))
        rows.append(_row(run_id, "deepseek-v3", "output_tokens_per_s", _num(out_tput),
                         notes + "; Output token throughput (tok/s)", **fields))
    return rows


# --------------------------------------------------------------------------------------------------------
# dstack: DeepSeek-R1 on 8xH200 and 8xMI300X with SGLang, vLLM and TensorRT-LLM (raw CSVs, copied verbatim)
# --------------------------------------------------------------------------------------------------------
DSTACK_COMMIT = "7f37e6697725e58dd09b9ef190b62ce19f01d45e"
DSTACK_BLOB = "https://github.com/dstackai/benchmarks/blob/" + DSTACK_COMMIT + "/Deepseek-R1/"
DSTACK_SRC = ("dstack, 'Evaluate DeepSeek-R1 Inference performance with SgLang, vLLM and TensorRT-LLM on 8xH200 and "
              "8xMi300x' (dstackai/benchmarks Deepseek-R1/), raw_data/{}")
DSTACK_GPU = {"h200": "h200", "mi300x": "mi300x", "mi300": "mi300x"}
DSTACK_ENGINE = {"sglang": "sglang", "vllm": "vllm", "trt-llm": "trtllm"}
# Engine versions and launch commands from Deepseek-R1/README.md ('Environment' and 'dstack Task').
DSTACK_STACK = {
    ("h200", "sglang"): ("0.4.3.post2", 1, "lmsysorg/sglang image, sglang.launch_server --model deepseek-ai/DeepSeek-R1 "
                         "--tp 8 --trust-remote-code --enable-dp-attention (attention data-parallel)"),
    ("mi300x", "sglang"): ("0.4.2.post4", 1, "rocm/sglang-staging:20250212 image, sglang.launch_server --tp 8 "
                           "--trust-remote-code"),
    ("h200", "vllm"): ("0.7.4.dev181+gf35f8e22", 1, "vllm serve deepseek-ai/DeepSeek-R1 --trust-remote-code "
                       "--tensor-parallel-size 8, VLLM_ATTENTION_BACKEND=FLASHMLA"),
    ("mi300x", "vllm"): ("0.7.3.dev138+g21f6ca217", 1, "rocm/vllm-dev:vllm-ds3-staging-0217 image, vllm serve "
                         "--tensor-parallel-size 8 --trust-remote-code --max-model-len 32768"),
    ("h200", "trtllm"): ("0.17.post1.dev", 4, "trtllm-serve --backend pytorch --max_batch_size 512 --max_num_tokens "
                         "16384 --max_seq_len 16384 --tp_size 8 --ep_size 4 (image built from TensorRT-LLM commit "
                         "9b931c0f6305aefa3660e6fb84a76a42c0eef167)"),
}
DSTACK_FP8 = ("deepseek-ai/DeepSeek-R1 is published with FP8 (e4m3, 128x128 block-scaled) weights and is served as "
              "such when no quantization flag is given")


def dstack_deepseek_r1() -> list[dict[str, str]]:
    rows = []
    with (SOURCES_DIR / "dstack_deepseek_r1_online_results.csv").open(encoding="utf-8-sig", newline="") as f:
        online = list(csv.DictReader(f))
    for r in online:
        if r["dataset_name"] != "random":
            continue  # generated-shared-prefix runs measure prefix caching, which the schema cannot state
        gpu, engine = DSTACK_GPU[r["GPU"]], DSTACK_ENGINE[r["backend"]]
        version, ep, launch = DSTACK_STACK[(gpu, engine)]
        isl, osl, conc = int(r["random_input_len"]), int(r["random_output_len"]), int(r["max_concurrency"])
        completed = int(r["completed"])
        notes = (f"raw_data/online_results.csv row GPU={r['GPU']}, backend={r['backend']}, max_concurrency={conc}, "
                 f"random {isl}/{osl} with random_range_ratio 1 (every prompt exactly {isl} in, {osl} out, "
                 f"ignore_eos), {completed} of 500 prompts completed; client: dstack's copy of sglang bench_serving "
                 f"(--max-concurrency {conc}, no request rate: closed loop); server: {launch}; {DSTACK_FP8}; "
                 f"KV cache at the engine default")
        fields = dict(source=DSTACK_SRC.format("online_results.csv"),
                      source_url=DSTACK_BLOB + "raw_data/online_results.csv", gpu=gpu, num_gpus=8, tp=8, pp=1,
                      ep=ep if ep > 1 else "", dp_replicas=1, engine=engine, engine_version=version, precision="fp8",
                      workload="concurrency", input_len=isl, output_len=osl, concurrency=conc, num_requests=500)
        run_id = f"dstack-dsr1-{engine}-{gpu}-tp8-c{conc}-{isl}-{osl}"
        for metric, column, ms in [("requests_per_s", "request_throughput", False),
                                   ("output_tokens_per_s", "output_throughput", False),
                                   ("e2e_latency_mean_s", "mean_e2e_latency_ms", True),
                                   ("ttft_mean_s", "mean_ttft_ms", True), ("ttft_p50_s", "median_ttft_ms", True),
                                   ("tpot_mean_s", "mean_tpot_ms", True), ("tpot_p50_s", "median_tpot_ms", True),
                                   ("itl_mean_s", "mean_itl_ms", True)]:
            value = _ms_to_s(r[column]) if ms else r[column]
            rows.append(_row(run_id, "deepseek-v3", metric, value,
                             notes + f"; column {column}" + (" converted to seconds" if ms else ""), **fields))
    with (SOURCES_DIR / "dstack_deepseek_r1_offline_results.csv").open(encoding="utf-8-sig", newline="") as f:
        offline = list(csv.DictReader(f))
    for r in offline:
        gpu, engine = DSTACK_GPU[r["GPU"]], DSTACK_ENGINE[r["backend"]]
        isl, osl, n = int(r["input_len"]), int(r["output_len"]), int(r["num_requests"])
        if engine == "trtllm":
            version, precision = "", "bf16"
            how = ("benchmark_throughput_trt.py on a TensorRT engine built from the TensorRT-LLM 'deepseek' branch "
                   "(convert_checkpoint --dtype bfloat16 --tp_size 8, trtllm-build --gemm_plugin bfloat16 "
                   "--max_batch_size 2048 --max_num_tokens 16384): BF16 weights; the README warns this engine path "
                   "is not the recommended PyTorch flow")
        else:
            version, precision = DSTACK_STACK[(gpu, engine)][0], "fp8"
            how = (f"dstack's benchmark_throughput.py (vLLM's, extended to SGLang's offline engine), --backend "
                   f"{r['backend']} --tensor-parallel-size 8 --max-model-len 32768, ignore_eos; {DSTACK_FP8}")
        notes = (f"raw_data/offline_results.csv row GPU={r['GPU']}, backend={r['backend']}, {isl}/{osl}, "
                 f"num_requests {n} all submitted at once; {how}; tokens_per_second is (input + output) tokens / "
                 f"elapsed (total_num_tokens / elapsed_time in the file)")
        fields = dict(source=DSTACK_SRC.format("offline_results.csv"),
                      source_url=DSTACK_BLOB + "raw_data/offline_results.csv", gpu=gpu, num_gpus=8, tp=8, pp=1,
                      dp_replicas=1, engine=engine, engine_version=version, precision=precision, workload="offline",
                      input_len=isl, output_len=osl, num_requests=n)
        run_id = f"dstack-dsr1-{engine}-{gpu}-tp8-offline-n{n}-{isl}-{osl}"
        rows.append(_row(run_id, "deepseek-v3", "requests_per_s", r["requests_per_second"],
                         notes + "; column requests_per_second", **fields))
        rows.append(_row(run_id, "deepseek-v3", "total_tokens_per_s", r["tokens_per_second"],
                         notes + "; column tokens_per_second", **fields))
    return rows


# --------------------------------------------------------------------------------------------------------
# dstack: Llama 3.1 405B FP8 with vLLM on 8xH100 SXM5 and 8xMI300X (comparison/h100sxm5_vs_mi300x)
# --------------------------------------------------------------------------------------------------------
D405_COMMIT = "85a2fe177aabe8a5556ce75e791dcd74b1cd8187"
D405_TREE = "https://github.com/dstackai/benchmarks/blob/" + D405_COMMIT + "/comparison/h100sxm5_vs_mi300x/"
D405_SRC = ("dstack, 'Llama3.1-405B-Fp8 Inference Performance Comparison between 8xH100SXM5 and 8xMi300x' "
            "(dstackai/benchmarks comparison/h100sxm5_vs_mi300x), {}")
META_FP8 = ("meta-llama/Llama-3.1-405B-FP8: Meta's FP8 checkpoint, which quantizes the feed-forward layers (weights "
            "and activations) and leaves self-attention in BF16 (Llama 3 paper, arXiv 2407.21783, Sec. 6.2; the "
            "same section: 'we do not perform quantization in the first and last Transformer layers'); the "
            "validator reads this checkpoint as precision fp8-ffn")
AMD_FP8 = ("amd/Llama-3.1-405B-Instruct-FP8-KV: AMD's Quark FP8 checkpoint (FP8 weights and activations; no "
           "--kv-cache-dtype flag, so the KV cache is the engine default)")
D405_STACKS = {
    "8xH100 1FP8-meta": ("h100-sxm", "0.6.3.post2.dev308+gb489fc3c", META_FP8,
                         "benchmark_throughput.py --backend vllm --tensor-parallel-size 8 --max-model-len 91680 "
                         "--num-scheduler-step 1"),
    "8xMi300x 1FP8-meta": ("mi300x", "0.6.3.dev109+gcb3b2b9b.d20241010", META_FP8,
                           "benchmark_throughput.py --backend vllm --tensor-parallel-size 8 --max-model-len 91680 "
                           "--enforce-eager --num-scheduler-step 15"),
    "8xMi300 1FP8-amd": ("mi300x", "0.6.4.dev4+gc9fc1608", AMD_FP8,
                         "benchmark_throughput.py --backend vllm --tensor-parallel-size 8 --max-model-len 91680 "
                         "--enforce-eager --num-scheduler-step 1"),
}
D405_SERVING = {
    "8xH100SXM5-serving": ("h100-sxm", "0.6.3.post2.dev308+gb489fc3c",
                           "nvcr.io/nvidia/pytorch:23.10-py3 with a vLLM nightly wheel, vllm serve "
                           "meta-llama/Llama-3.1-405B-FP8 --tensor-parallel-size 8 --max-model-len 91680"),
    "8xMi300x-serving-meta": ("mi300x", "0.6.3.dev109+gcb3b2b9b.d20241010",
                              "ghcr.io/embeddedllm/vllm-rocm:cb3b2b9 image, VLLM_RPC_TIMEOUT=30000 "
                              "VLLM_USE_TRITON_FLASH_ATTN=0 vllm serve meta-llama/Llama-3.1-405B-FP8 -tp 8 "
                              "--max-seq-len-to-capture 16384 --enable-chunked-prefill=False --num-scheduler-step 15 "
                              "--max-num-seqs 1024"),
}

# how each serving run's server streamed a multi-step run, read from the result files' per-request itls lists
# (benchmark_serving.py appends one ITL per received chunk); the lists are dropped from the summaries JSON
D405_STREAMING = {
    "8xMi300x-serving-meta": (
        "streaming (multi_step_stream=step): the result files' per-request itls lists hold one gap per generated "
        "token after the first (120502 gaps for 120551 tokens at QPS 1000, 122096 / 122152 at 16, 120226 / 120276 "
        "at 32; 10th percentile 137-140 ms, none or 32-33 under 1 ms), so this build streamed each step's token as "
        "it was sampled, not one chunk per 15-step run (benchmark_serving.py appends one ITL per received chunk)"),
}


def dstack_llama405b() -> list[dict[str, str]]:
    import json
    rows = []
    with (SOURCES_DIR / "dstack_llama405b_offline_throughput_comparsion.csv").open(encoding="utf-8", newline="") as f:
        offline = list(csv.DictReader(f))
    for r in offline:
        if r["gpu"] not in D405_STACKS:
            continue  # 4-GPU and two-replica MI300X rows: their launch commands are not on the page
        gpu, version, ckpt, command = D405_STACKS[r["gpu"]]
        isl, osl, n = int(r["input_len"]), int(r["output_len"]), int(r["num_requests"])
        notes = (f"csv_data/throughput_comparsion.csv row gpu='{r['gpu']}', {isl}/{osl}, batch_size {n}; vLLM "
                 f"{version}; {command} --num-prompts {n} (all {n} requests at once, fixed lengths); {ckpt}; "
                 f"tokens_per_second = total_num_tokens (input + output) / elapsed_time")
        fields = dict(source=D405_SRC.format("csv_data/throughput_comparsion.csv"),
                      source_url=D405_TREE + "csv_data/throughput_comparsion.csv", gpu=gpu, num_gpus=8, tp=8, pp=1,
                      dp_replicas=1, engine="vllm", engine_version=version, precision="fp8", workload="offline",
                      input_len=isl, output_len=osl, num_requests=n)
        tag = "amd" if "amd" in r["gpu"] else "meta"
        run_id = f"dstack405-vllm-{gpu}-{tag}fp8-tp8-offline-n{n}-{isl}-{osl}"
        rows.append(_row(run_id, "llama3.1-405b", "requests_per_s", r["requests_per_second"],
                         notes + "; column requests_per_second", **fields))
        rows.append(_row(run_id, "llama3.1-405b", "total_tokens_per_s", r["tokens_per_second"],
                         notes + "; column tokens_per_second", **fields))
    summaries = json.loads((SOURCES_DIR / "dstack_llama405b_serving_summaries.json").read_text(encoding="utf-8"))
    for path, d in summaries["files"].items():
        folder = path.split("/")[-2]
        gpu, version, launch = D405_SERVING[folder]
        rate = d["request_rate"]
        rate_text = format(rate, "g")
        notes = (f"raw_data/{folder}/{path.split('/')[-1]} (benchmark_serving.py result file; per-request lists "
                 f"dropped in serving_sources/dstack_llama405b_serving_summaries.json); vLLM {version}; server: "
                 f"{launch}; {META_FP8}; client: benchmark_serving.py --backend vllm --dataset-name sharegpt "
                 f"--request-rate {rate_text} (Poisson arrivals), {d['num_prompts']} prompts, {d['completed']} "
                 f"completed, {d['total_input_tokens']} input and {d['total_output_tokens']} output tokens in all")
        if folder in D405_STREAMING:
            notes += "; " + D405_STREAMING[folder]
        fields = dict(source=D405_SRC.format(f"raw_data/{folder}"), source_url=D405_TREE + path.split(
                          "comparison/h100sxm5_vs_mi300x/")[1], gpu=gpu, num_gpus=8, tp=8, pp=1, dp_replicas=1,
                      engine="vllm", engine_version=version, precision="fp8", workload="poisson", dataset="sharegpt",
                      request_rate=rate_text, num_requests=d["num_prompts"])
        run_id = f"dstack405-vllm-{gpu}-metafp8-tp8-sharegpt-qps{rate_text}"
        for metric, key, ms in [("requests_per_s", "request_throughput", False),
                                ("output_tokens_per_s", "output_throughput", False),
                                ("total_tokens_per_s", "total_token_throughput", False),
                                ("ttft_mean_s", "mean_ttft_ms", True), ("ttft_p50_s", "median_ttft_ms", True),
                                ("tpot_mean_s", "mean_tpot_ms", True), ("tpot_p50_s", "median_tpot_ms", True),
                                ("itl_mean_s", "mean_itl_ms", True)]:
            value = _ms_to_s(repr(d[key])) if ms else repr(d[key])
            rows.append(_row(run_id, "llama3.1-405b", metric, value,
                             notes + f"; field {key}" + (" converted to seconds" if ms else ""), **fields))
    return rows


BUILDERS = [trtllm_017_throughput, trtllm_10_throughput, trtllm_014_online, sglang_vs_vllm060, mlperf_inference_v41,
            rocm_vllm_mi300x, trtllm_static, trtllm_deepseek_r1,
            sglang_dsv3_h200, dstack_deepseek_r1, dstack_llama405b]


# a running-request limit the launch command quoted in the notes states: the max_batch column (the schema's place
# for the engine's batch limit), so that the twin runs the engine with it
_BATCH_FLAG = re.compile(r"(?:--max-num-seqs|--max_batch_size)[ =](\d+)")


def _batch_limit_from_launch(row: dict[str, str]) -> dict[str, str]:
    m = None if row["max_batch"] else _BATCH_FLAG.search(row["notes"])
    if m:
        row["max_batch"] = m.group(1)
        row["notes"] += (f" (max_batch {m.group(1)}: the launch command's {m.group(0)}, the engine's limit on "
                         "running requests)")
    return row


def build() -> list[dict[str, str]]:
    rows = [_batch_limit_from_launch(r) for builder in BUILDERS for r in builder()]
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
