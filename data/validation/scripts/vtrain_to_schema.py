"""Convert vTrain's single-node ground truth into clustertwin's validation schema.

Source: VIA-Research/vTrain (Bang et al., "vTrain: A Simulation Framework for Evaluating Cost-effective
and Compute-optimal Large Language Model Training", MICRO 2024, arXiv 2312.12391), MIT licence,
commit f8dda8473a48b373b1d25f51f52d685bff5150c5 ("vTrain release", 2024-09-26).

Inputs read from that commit (nothing else is used):
  data/ground_truth_single.csv                     1,440 measured iterations (UTF-8 with BOM);
                                                   header "... iteration time (ms)"
  data/README.md                                   "collected using Megatron-DeepSpeed codebase"
  config/validation/single/config_val_single_NNNN.json
                                                   vTrain's config for data row NNNN (0-based); the
                                                   script checks that its ten columns equal the row
  src/config.py                                    vTrainConfig defaults (vocab_size 50257)
Stated in vTrain's model code, which is what vTrain simulates these runs with (quoted in the notes):
  src/predictor.py     torch.set_default_dtype(torch.float16)
  src/model/gpt_modeling.py   FusedScaleMaskSoftmax(input_in_fp16=True, ..., masked_softmax_fusion=True);
                              MLP hidden -> 4*hidden with bias-GeLU; learned position embeddings

Re-run (from the clustertwin repository root):
  git clone https://github.com/VIA-Research/vTrain ../vTrain    # or any clone / bare mirror
  python data/validation/scripts/vtrain_to_schema.py --repo ../vTrain \
      --out data/validation/vtrain_single_node.csv
The script reads the files with `git show <commit>:<path>`, so the clone's checkout does not matter;
it needs only the Python standard library and git. The output is deterministic (CRLF, like the other
files in data/validation/).
"""
from __future__ import annotations

import argparse
import csv
import io
import json
from decimal import Decimal
import subprocess
import sys

COMMIT = "f8dda8473a48b373b1d25f51f52d685bff5150c5"
REPO_URL = "https://github.com/VIA-Research/vTrain"
DATA = "data/ground_truth_single.csv"
CONFIG = "config/validation/single/config_val_single_{:04d}.json"

# data/ground_truth_single.csv columns -> vTrain config keys (checked row by row)
SRC_COLUMNS = [
    ("# GPUs", "num_gpus"),
    ("global batch", "global_batch_size"),
    ("micro batch", "micro_batch_size"),
    ("hidden size", "hidden_size"),
    ("attention heads", "num_attention_heads"),
    ("# layers", "num_layers"),
    ("sequence length", "max_length"),
    ("tensor parallelism", "tensor_parallel_size"),
    ("data parallelism", "data_parallel_size"),
    ("pipeline parallelism", "pipeline_parallel_size"),
]
TIME_COLUMN = "iteration time (ms)"

# the shared schema's columns in public_runs.csv's order, then the optional ones this file fills
COLUMNS = ["run_id", "source", "source_url", "model", "arch", "layers", "hidden", "heads", "kv_heads",
           "ffn_hidden", "vocab", "seq_len", "moe_experts", "moe_topk", "gpu", "num_gpus", "gpus_per_node",
           "tp", "pp", "vpp", "dp", "cp", "ep", "sp", "zero_stage", "recompute", "micro_batch", "global_batch",
           "precision", "framework", "metric", "value", "notes",
           "framework_version", "attention_kernel", "compile", "dp_overlap"]

VOCAB_DEFAULT = 50257   # src/config.py: vTrainConfig(vocab_size=50257); no validation config overrides it


def git_show(repo: str, path: str) -> str:
    out = subprocess.run(["git", "-C", repo, "show", f"{COMMIT}:{path}"], check=True, capture_output=True)
    return out.stdout.decode("utf-8-sig")


def check_sources(repo: str) -> None:
    """Fail loudly if the statements the cells rest on are not in the commit any more."""
    needles = {
        "data/README.md": "Megatron-DeepSpeed",
        "src/config.py": "vocab_size: int                            = 50257",
        "src/predictor.py": "torch.set_default_dtype(torch.float16)",
        "src/model/gpt_modeling.py": "masked_softmax_fusion = True",
    }
    for path, needle in needles.items():
        if needle not in git_show(repo, path):
            sys.exit(f"error: {path}: {needle!r} not found at {COMMIT}; the notes would be wrong")
    if "4*hidden_size" not in git_show(repo, "src/model/gpt_modeling.py"):
        sys.exit("error: src/model/gpt_modeling.py: MLP width 4*hidden_size not found")


def convert(repo: str) -> list[dict[str, str]]:
    check_sources(repo)
    reader = csv.DictReader(io.StringIO(git_show(repo, DATA)))
    expected = [c for c, _ in SRC_COLUMNS] + [TIME_COLUMN]
    if reader.fieldnames != expected:
        sys.exit(f"error: {DATA}: header {reader.fieldnames} is not {expected}")
    out = []
    for i, src in enumerate(reader):
        row = {k: int(src[c]) for c, k in SRC_COLUMNS}
        cfg = json.loads(git_show(repo, CONFIG.format(i)))
        for _, k in SRC_COLUMNS:
            if cfg[k] != row[k]:
                sys.exit(f"error: data row {i}: {k} = {row[k]} but {CONFIG.format(i)} has {cfg[k]}")
        fixed = {"gpu_name": "A100", "use_checkpoint": True, "use_gradient_bucket": False,
                 "pipeline_scheduling": "1f1b", "node_size": 8}
        for k, v in fixed.items():
            if cfg.get(k) != v:
                sys.exit(f"error: {CONFIG.format(i)}: {k} = {cfg.get(k)!r}, the notes assume {v!r}")
        if "vocab_size" in cfg:
            sys.exit(f"error: {CONFIG.format(i)} sets vocab_size; the script assumes the default")
        gpus, tp, pp, dp = row["num_gpus"], row["tensor_parallel_size"], row["pipeline_parallel_size"], \
            row["data_parallel_size"]
        if tp * pp * dp != gpus:
            sys.exit(f"error: data row {i}: tp*pp*dp = {tp * pp * dp} != {gpus} GPUs")
        gb, mb, h, layers = row["global_batch_size"], row["micro_batch_size"], row["hidden_size"], row["num_layers"]
        if gb % (dp * mb):
            sys.exit(f"error: data row {i}: global batch {gb} is not a multiple of dp*micro = {dp * mb}")
        n_micro = gb // (dp * mb)
        cfg_name = CONFIG.format(i).rsplit("/", 1)[1]
        notes = (
            f"Megatron-DeepSpeed on {gpus} A100s of one node (vTrain data/README.md); value = {src[TIME_COLUMN]} ms"
            f" / 1000; {n_micro} micro-batch(es) of {mb} per DP rank per iteration. {cfg_name}: use_checkpoint"
            " true -> recompute full; use_gradient_bucket false -> dp_overlap 0; 1F1B. fp16, fused softmax (no"
            " flash-attn), ffn 4*hidden, vocab 50257 before padding: from the code vTrain simulates these runs"
            " with, not a log of the run. Unstated: A100 40 or 80 GB, Megatron-DeepSpeed commit and flags, ZeRO"
            " stage, sequence parallelism, timing method (see data/validation/README.md)."
        )
        if pp == 1:
            notes += " pp=1: measured micro_batch kept (vTrain's simulator uses global/dp instead)."
        out.append({
            "run_id": f"vtrain-single-{i:04d}",
            "source": (f"vTrain (VIA Research, KAIST; Bang et al., MICRO 2024) {DATA} data row {i} (0-based),"
                       f" config/validation/single/{cfg_name}"),
            "source_url": f"{REPO_URL}/blob/{COMMIT}/{DATA}",
            "model": f"gpt-h{h}-l{layers}",
            "arch": "gpt",
            "layers": str(layers),
            "hidden": str(h),
            "heads": str(row["num_attention_heads"]),
            "kv_heads": str(row["num_attention_heads"]),
            "ffn_hidden": str(4 * h),
            "vocab": str(VOCAB_DEFAULT),
            "seq_len": str(row["max_length"]),
            "moe_experts": "",
            "moe_topk": "",
            "gpu": "a100",
            "num_gpus": str(gpus),
            "gpus_per_node": "8",
            "tp": str(tp),
            "pp": str(pp),
            "vpp": "1",
            "dp": str(dp),
            "cp": "1",
            "ep": "1",
            "sp": "",
            "zero_stage": "",
            "recompute": "full",
            "micro_batch": str(mb),
            "global_batch": str(gb),
            "precision": "fp16",
            "framework": "megatron-deepspeed",   # the stack data/README.md names (a profile of its own)
            "metric": "iteration_time_s",
            "value": str(Decimal(src[TIME_COLUMN]).scaleb(-3)),   # exact: ms -> s
            "notes": notes,
            "framework_version": "",
            "attention_kernel": "unfused",
            "compile": "",
            "dp_overlap": "0",
        })
    n_cfg = subprocess.run(["git", "-C", repo, "ls-tree", "--name-only", COMMIT, "config/validation/single/"],
                           check=True, capture_output=True, text=True).stdout.split()
    if len(n_cfg) != len(out):
        sys.exit(f"error: {len(out)} data rows but {len(n_cfg)} configs")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", required=True, help="a clone or bare mirror of VIA-Research/vTrain holding the commit")
    ap.add_argument("--out", required=True, help="CSV to write")
    args = ap.parse_args(argv)
    rows = convert(args.repo)
    with open(args.out, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\r\n")
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {len(rows)} rows to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
