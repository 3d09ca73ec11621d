"""Named request-length distributions (``--dataset NAME``; the ``dataset`` column of a serving CSV):
what a benchmark client sends when it samples a named dataset, each with its source, sampled
deterministically given a seed. A distribution holds only published figures; where a part is not
published (an output-length spread, an input-length mean) it says so and sampling asks for the
missing length instead of guessing it.

>>> inp, out = sample("sharegpt", 4, seed=0, output_len=194)
>>> len(inp), int(out[0])
(4, 194)
>>> bool((sample("sharegpt", 50, seed=3)[0] == sample("sharegpt", 50, seed=3)[0]).all())
True
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..errors import DataError

_LENGTHS = Path(__file__).resolve().parent / "lengths"


@dataclass(frozen=True)
class Dataset:
    """A request-length distribution: an empirical sample of input lengths (``input_file``, one
    length a line after a header) and/or published means; ``None`` where nothing is published."""

    name: str
    description: str
    sources: tuple[str, ...]
    input_file: str | None = None          # empirical input lengths (tokens), in lengths/
    input_mean: float | None = None        # published mean input tokens (used when no sample)
    output_mean: float | None = None       # published mean output tokens per request
    output_note: str = ""                  # what the output lengths are and what is not published
    aliases: tuple[str, ...] = ()

    def input_lengths(self) -> np.ndarray | None:
        return _load(self.input_file) if self.input_file else None


# ShareGPT as vLLM's benchmarks/benchmark_serving.py (and SGLang's bench_serving, a copy of its
# sampler) samples it: the first human turn of ShareGPT_V3_unfiltered_cleaned_split conversations as
# the prompt, the first reply's token count as the requested output, pairs with prompt or output under
# 4 tokens or prompt > 1024 or prompt + output > 2048 tokens dropped, shuffled with the client's seed.
SHAREGPT = Dataset(
    "sharegpt",
    "ShareGPT V3 prompts as vLLM's benchmark_serving samples them, Llama 3 tokenizer",
    ("input lengths: the 1,000 prompt lengths (tokens, Llama 3.1 tokenizer; mean 215.2, median 83) "
     "recorded in dstack's benchmark_serving result files, dstackai/benchmarks "
     "comparison/h100sxm5_vs_mi300x/raw_data/8xH100SXM5-serving/*.json (field input_lens; identical in "
     "all six 405B result files), commit 85a2fe177aabe8a5556ce75e791dcd74b1cd8187",
     "output lengths: the requested output is the reference reply's length, but no per-request list of "
     "it is published; SGLang's benchmark_vllm_060 offline table (sglang.bench_serving, 5,000 ShareGPT "
     "prompts, EOS ignored so every request emits its requested length) gives output tokens/s over "
     "requests/s = 4281.51 / 22.03 = 194.3 tokens per request (vLLM row: 4132.37 / 21.27 = 194.3), "
     "https://github.com/sgl-project/sglang/blob/120affb9613cc3f5bcd055ec09c7621d3ced0ebc/benchmark/"
     "benchmark_vllm_060/README.md"),
    input_file="sharegpt_llama3_prompts.csv",
    output_mean=194.3,
    output_note="every request asks for the published mean output (194 tokens); the spread of ShareGPT's "
                "reply lengths is not published per request",
)

# MLPerf Inference llama2-70b: 24,576 OpenOrca GPT-4 samples (processorca.py --seqlen_limit=1024).
OPENORCA = Dataset(
    "openorca",
    "MLPerf Inference llama2-70b data set: 24,576 OpenOrca GPT-4 samples, Llama 2 tokenizer",
    ("mean output: 294.45 tokens per sample, the reference FP16 run's 'Tokens per sample' accuracy target "
     "(closed division must lie within 90-110% of it), mlcommons/inference language/llama2-70b/README.md, "
     "'Accuracy Target'",
     "mean input: 5,463,976 input tokens over the 24,576 samples = 222.3 tokens (min 48, max 1,021), the "
     "tok_input_length statistics of the official pickle (open_orca_gpt4_tokenized_llama.sampled_24576.pkl.gz, "
     "md5 c247a315b9328365f66d2c2585b35cd4) recorded in FlashLab-MBZUAI/HBFSim "
     "validation/calibration/h100-llama2-70b-calibration-protocol.json (workload_evidence.lengths_csv."
     "input_tokens), commit 96cf1b37cd60e8fabb77967a591cf60edb8d1f23; the same file gives the GPT-4 reference "
     "outputs' 5,379,553 tokens (218.9 per sample), which is not what Llama 2 generates",
     "inputs at most 1,024 tokens (processorca.py --seqlen_limit=1024, same README); only the mean, minimum "
     "and maximum of the input lengths are published, not their distribution"),
    input_mean=5463976 / 24576,
    output_mean=294.45,
    output_note="every request has the published mean input (222 tokens) and mean output (294.45 tokens); "
                "the spread of either is not published",
    aliases=("mlperf-openorca", "open-orca"),
)

MLPERF_MIXTRAL = Dataset(
    "mlperf-mixtral",
    "MLPerf Inference mixtral-8x7b data set: 5,000 samples each of OpenOrca, GSM8K and MBXP",
    ("mlcommons/inference language/mixtral-8x7b/README.md names the 15,000 samples "
     "(2024.06.06_mixtral_15k_v4.pkl); no published mean input length was found",
     "mean output: 145.9 tokens per sample, the reference run's TOKENS_PER_SAMPLE accuracy target as NVIDIA's "
     "v4.1 submission prints it ('TOKENS_PER_SAMPLE: 145.900 (Valid Range=[131.310, 160.490])', i.e. 90-110% "
     "of 145.9), mlcommons/inference_results_v4.1 closed/NVIDIA/code/mixtral-8x7b/tensorrt/README.md, commit "
     "a2f5d66d17e8f75c02fd74dfe810ecca6a046696"),
    output_mean=145.9,
    output_note="every request asks for the published mean output (145.9 tokens); the input mean is not published",
)

DATASETS: dict[str, Dataset] = {d.name: d for d in (SHAREGPT, OPENORCA, MLPERF_MIXTRAL)}
_ALIASES = {a: d.name for d in DATASETS.values() for a in d.aliases}


@lru_cache(maxsize=None)
def _load(file: str) -> np.ndarray:
    x = np.loadtxt(_LENGTHS / file, skiprows=1, dtype=np.int64, ndmin=1)
    x.setflags(write=False)
    return x


def get_dataset(name: str) -> Dataset:
    key = (name or "").strip().lower()
    key = _ALIASES.get(key, key)
    if key not in DATASETS:
        raise DataError("dataset", f"unknown dataset {name!r}", f"use one of {', '.join(sorted(DATASETS))} "
                        "or give --dataset-file with per-request lengths")
    return DATASETS[key]


def missing(name: str, output_len: int | None = None) -> str:
    """Why requests of ``name`` cannot be drawn (empty: they can)."""
    d = get_dataset(name)
    if d.input_file is None and d.input_mean is None:
        return f"dataset {d.name}: no published input-length statistic ({'; '.join(d.sources)})"
    if output_len is None and d.output_mean is None:
        return f"dataset {d.name}: no published output-length statistic ({'; '.join(d.sources)})"
    return ""


def sample(name: str, n: int, *, seed: int = 0, output_len: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``n`` requests' (input, output) lengths from dataset ``name``: inputs drawn from its empirical
    sample (without replacement while it lasts, then with), seeded; outputs ``output_len`` when given,
    else the dataset's published mean output, the same for every request."""
    d = get_dataset(name)
    why = missing(name, output_len)
    if why:
        raise DataError("dataset", why, "give input_len and output_len (the run's mean lengths) instead")
    if n < 1:
        raise DataError("num_requests", f"{n} must be at least 1", "give a request count")
    rng = np.random.default_rng(seed)
    pool = d.input_lengths()
    if pool is not None:
        inp = rng.choice(pool, size=n, replace=n > len(pool)).astype(np.int64)
    else:
        inp = np.full(n, int(round(d.input_mean)), dtype=np.int64)   # type: ignore[arg-type]
    out_mean = output_len if output_len is not None else d.output_mean
    out = np.full(n, max(1, int(round(out_mean))), dtype=np.int64)   # type: ignore[arg-type]
    return inp, out


def describe(name: str) -> str:
    """One line for a run's assumptions: what was drawn and from where."""
    d = get_dataset(name)
    return f"dataset {d.name} ({d.description}): {d.output_note or 'lengths as published'}; sources: " + \
        "; ".join(d.sources)


__all__ = ["Dataset", "DATASETS", "get_dataset", "sample", "missing", "describe"]
