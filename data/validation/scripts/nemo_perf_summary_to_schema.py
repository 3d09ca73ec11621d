"""Convert NVIDIA NeMo's 24.07 performance summary (pretraining table) into clustertwin's validation schema.

Source: NVIDIA/NeMo docs/source/performance/performance_summary.md at commit
8e3d65dcfe3504689bfc5b6e67d502780aacad41 ("24.07 perf numbers", 2024-09-09), Apache-2.0. The page was
removed from the repository on 2024-12-12 (commit d31653f7, "perf summary docs link") when the summary moved to
the NeMo user guide; this is its last version. Its "Pretraining" table: FP8 pretraining on DGX-H100 with the
NeMo 24.07 container, one line per model with #-GPUs, GBS, MBS, sequence length, TP, PP, CP, VP, Tokens / sec /
GPU and Model TFLOP / sec / GPU. The "Finetuning" table (SFT and LoRA) is not converted.

The page states the plan, not the rest of the recipe. The rest is read from the NeMo-Framework-Launcher
configuration each model was trained with at tag 24.07 (commit 8325688d8345a5513660f0f8390f0482a721c009,
launcher_scripts/conf/training/<family>/<size>.yaml, and examples/training/<family>/h100/*_fp8*.sh whose
H100 plans match the table's Llama rows): model dimensions, activation recompute, sequence parallelism,
userbuffer TP overlap, optimizer. Each row's notes say which file gave what.

Re-run (from the clustertwin repository root):
  git clone https://github.com/NVIDIA/NeMo ../NeMo                      # or any clone / bare mirror
  python data/validation/scripts/nemo_perf_summary_to_schema.py --repo ../NeMo \
      --out data/validation/nemo_perf_summary_runs.csv
The script reads the page with `git show <commit>:<path>`; it needs only the Python standard library and git.
The output is deterministic (CRLF, like the other files in data/validation/).
"""
from __future__ import annotations

import argparse
import csv
import subprocess
import sys

COMMIT = "8e3d65dcfe3504689bfc5b6e67d502780aacad41"
# the page's earlier versions of the same table (same plans, other figures), quoted in the notes as the spread
# of NVIDIA's own measurements: 4c73f776 (2024-08-14, "24.07 perf") and 3a8081fe (2024-08-22, "24.07 vboost
# numbers", measured with the GPU's voltage boost raised)
EARLIER = (("4c73f77670624bc1fd97ce444dea4e22ef5eb9c5", "2024-08-14"),
           ("3a8081fef634686881d7464c5b847212a16c5431", "2024-08-22, vboost"))
PAGE = "docs/source/performance/performance_summary.md"
PAGE_URL = f"https://github.com/NVIDIA/NeMo/blob/{COMMIT}/{PAGE}"
LAUNCHER = "https://github.com/NVIDIA/NeMo-Framework-Launcher/blob/8325688d8345a5513660f0f8390f0482a721c009"

COLUMNS = ["run_id", "source", "source_url", "model", "arch", "layers", "hidden", "heads", "kv_heads",
           "ffn_hidden", "vocab", "seq_len", "moe_experts", "moe_topk", "gpu", "num_gpus", "gpus_per_node",
           "tp", "pp", "vpp", "dp", "cp", "ep", "sp", "zero_stage", "recompute", "micro_batch",
           "global_batch", "precision", "framework", "metric", "value", "notes",
           "framework_version", "model_preset", "tp_overlap", "attention_kernel", "exp_avg_dtype", "master_weights"]

# Per model of the table: dimensions and the launcher yaml's recipe (tag 24.07). 'yaml' is the path under
# launcher_scripts/conf/training/; 'sp' and 'tp_overlap' are the yaml's sequence_parallel and
# ub_tp_comm_overlap (only read where tp > 1); 'recompute' its activations_checkpoint_granularity.
MODELS = {
    "GPT3-5B": dict(arch="gpt", layers=24, hidden=4096, heads=32, kv=32, ffn=16384, vocab=50257, yaml="gpt3/5b",
                    sp=0, tp_overlap=0, recompute="none", preset="",
                    dims="num_layers 24, hidden_size 4096, num_attention_heads 32, ffn_hidden_size 4*hidden; "
                         "GPT2BPETokenizer (50,257 tokens, padded by the framework to a multiple of 128); "
                         "LayerNorm, GELU, learned positions, biases, hidden and attention dropout 0.1"),
    "GPT3-20B": dict(arch="gpt", layers=44, hidden=6144, heads=48, kv=48, ffn=24576, vocab=50257, yaml="gpt3/20b",
                     sp=1, tp_overlap=1, recompute="none", preset="",
                     dims="num_layers 44, hidden_size 6144, num_attention_heads 48, ffn_hidden_size 4*hidden; "
                          "GPT2BPETokenizer (50,257 tokens); LayerNorm, GELU, learned positions, biases, dropout 0.1"),
    "GPT3-175B": dict(arch="gpt", layers=96, hidden=12288, heads=96, kv=96, ffn=49152, vocab=50257,
                      yaml="gpt3/175b", sp=1, tp_overlap=0, recompute="none", preset="",
                      dims="num_layers 96, hidden_size 12288, num_attention_heads 96, ffn_hidden_size 4*hidden; "
                           "GPT2BPETokenizer (50,257 tokens); LayerNorm, GELU, learned positions, biases, "
                           "dropout 0.1"),
    "LLAMA2-7B": dict(arch="llama", layers=32, hidden=4096, heads=32, kv=32, ffn=11008, vocab=32000,
                      yaml="llama/llama2_7b", sp=0, tp_overlap=0, recompute="none", preset="",
                      dims="num_layers 32, hidden_size 4096, num_attention_heads 32 (MHA), ffn_hidden_size 11008; "
                           "Llama 2 SentencePiece tokenizer (32,000 tokens); RMSNorm, SwiGLU, RoPE, no biases"),
    "LLAMA2-13B": dict(arch="llama", layers=40, hidden=5120, heads=40, kv=40, ffn=13824, vocab=32000,
                       yaml="llama/llama2_13b", sp=0, tp_overlap=0, recompute="none", preset="",
                       dims="num_layers 40, hidden_size 5120, num_attention_heads 40 (MHA), ffn_hidden_size 13824; "
                            "Llama 2 SentencePiece tokenizer (32,000 tokens)"),
    "LLAMA2-70B": dict(arch="llama", layers=80, hidden=8192, heads=64, kv=8, ffn=28672, vocab=32000,
                       yaml="llama/llama2_70b", sp=1, tp_overlap=1, recompute="none", preset="",
                       dims="num_layers 80, hidden_size 8192, num_attention_heads 64, num_query_groups 8, "
                            "ffn_hidden_size 28672; Llama 2 SentencePiece tokenizer (32,000 tokens)"),
    "Nemotron-8B": dict(arch="gpt", layers=32, hidden=4096, heads=32, kv=32, ffn=16384, vocab=256000,
                        yaml="nemotron/nemotron_8b", sp=1, tp_overlap=1, recompute="none", preset="nemotron-3-8b",
                        dims="nemotron3-8B: num_layers 32, hidden_size 4096, num_attention_heads 32 (MHA), "
                             "ffn_hidden_size 16384, squared-ReLU, LayerNorm1p, RoPE, no biases, no dropout "
                             "(catalog preset nemotron-3-8b); vocab 256,000 (the Nemotron SentencePiece "
                             "tokenizer; the yaml names only its file: assumed)"),
    "Nemotron-22B": dict(arch="gpt", layers=40, hidden=6144, heads=48, kv=48, ffn=24576, vocab=256000,
                         yaml="nemotron/nemotron_22b", sp=1, tp_overlap=1, recompute="none", preset="nemotron-22b",
                         dims="nemotron3-22B: num_layers 40, hidden_size 6144, num_attention_heads 48 (MHA), "
                              "ffn_hidden_size 24576, squared-ReLU, LayerNorm1p, RoPE, no biases, no dropout "
                              "(catalog preset nemotron-22b); vocab 256,000 (assumed, as for Nemotron-8B)"),
    "Nemotron-340B": dict(arch="gpt", layers=96, hidden=18432, heads=96, kv=8, ffn=73728, vocab=256000,
                          yaml="nemotron/nemotron_340b", sp=1, tp_overlap=0, recompute="selective",
                          preset="nemotron-4-340b", optim_dtype="bf16",
                          dims="nemotron4-340B: num_layers 96, hidden_size 18432, num_attention_heads 96, "
                               "num_query_groups 8, ffn_hidden_size 4*hidden, squared-ReLU, no biases "
                               "(catalog preset nemotron-4-340b); vocab 256,000"),
    "LLAMA3-8B": dict(arch="llama", layers=32, hidden=4096, heads=32, kv=8, ffn=14336, vocab=128256,
                      yaml="llama/llama3_8b", sp=0, tp_overlap=0, recompute="none", preset="",
                      dims="num_layers 32, hidden_size 4096, num_attention_heads 32, num_query_groups 8, "
                           "ffn_hidden_size 14336; tokenizer meta-llama/Meta-Llama-3-8B (128,256 tokens)"),
    "LLAMA3-70B": dict(arch="llama", layers=80, hidden=8192, heads=64, kv=8, ffn=28672, vocab=128256,
                       yaml="llama/llama3_70b", sp=1, tp_overlap=1, recompute="none", preset="",
                       dims="num_layers 80, hidden_size 8192, num_attention_heads 64, num_query_groups 8, "
                            "ffn_hidden_size 28672; tokenizer meta-llama/Meta-Llama-3-70B (128,256 tokens)"),
}

# NeMo-Framework-Launcher 24.07, launcher_scripts/conf/config.yaml env_vars (exported into every job the launcher
# starts): "NVTE_FUSED_ATTN: 0 # Disable cudnn FA until we've tested it more" (added in 562dcb45, 2024-02-13; removed
# on main only after the tag, 04b8d098 "enable fused attention", 2024-08-29). Transformer Engine 1.8 (the NeMo 24.07
# container's, NeMo user guide "Software Component Versions") then sets use_fused_attention False
# (DotProductAttention.__init__: int(os.getenv("NVTE_FUSED_ATTN", "1"))) and runs the flash-attn package
# (flash_attn_varlen_func, FlashAttention-2) instead of cuDNN fused attention, which it would prefer on sm90.
ATTENTION = "flash2"

SOURCE = ("NVIDIA NeMo docs/source/performance/performance_summary.md (NeMo 24.07 container, DGX-H100, FP8), "
          "'Pretraining' table row '{model}' ({gpus} GPUs)")


def read_page(repo: str, commit: str = COMMIT) -> str:
    return subprocess.run(["git", "-C", repo, "show", f"{commit}:{PAGE}"], check=True, capture_output=True,
                          text=True).stdout


def pretraining_rows(page: str) -> list[dict[str, str]]:
    """The lines of the 'Pretraining' table as dicts keyed by its header cells."""
    lines = page.splitlines()
    start = lines.index("### Pretraining")
    table = [ln for ln in lines[start:lines.index("### Finetuning")] if ln.startswith("|")]
    header = [c.strip() for c in table[0].strip().strip("|").split("|")]
    rows = []
    for ln in table[2:]:
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        rows.append(dict(zip(header, cells)))
    return rows


def integer(cell: str) -> int:
    """A table cell as an integer; a cell written as a markdown link ('[842](url)') gives its text."""
    text = cell.split("]")[0].lstrip("[") if cell.startswith("[") else cell
    return int(text.replace(",", ""))


def convert(page: str, earlier: dict[str, list[tuple[str, str]]] | None = None) -> list[dict[str, str]]:
    """The rows of the page; ``earlier`` maps a row key (model, GPUs) to (version, tokens/s/GPU) of the
    page's earlier versions."""
    out = []
    for src in pretraining_rows(page):
        name = src["Model"]
        m = MODELS[name]
        gpus, gbs, mbs, seq = (integer(src[k]) for k in ("#-GPUs", "GBS", "MBS", "Sequence Length"))
        tp, pp, cp, vp = (integer(src[k]) for k in ("TP", "PP", "CP", "VP"))
        tps, tflops = integer(src["Tokens / sec / GPU"]), integer(src["Model TFLOP / sec / GPU"])
        if gpus % (tp * pp * cp):
            raise ValueError(f"{name}: {gpus} GPUs do not divide by tp*pp*cp")
        dp = gpus // (tp * pp * cp)
        if gbs % (dp * mbs):
            raise ValueError(f"{name}: GBS {gbs} is not a multiple of dp*MBS = {dp * mbs}")
        n_micro = gbs // (dp * mbs)
        step_s = gbs * seq / (tps * gpus)
        sp = m["sp"] if tp > 1 else 0
        tp_overlap = str(m["tp_overlap"]) if tp > 1 else ""
        yaml = f"{LAUNCHER}/launcher_scripts/conf/training/{m['yaml']}.yaml"
        recompute_src = ("activations_checkpoint_granularity: selective" if m["recompute"] == "selective"
                         else "activations_checkpoint_granularity: null (no recompute)")
        # optimizer state dtype: the yaml's optim.dtype (apex DistributedFusedAdam: the optimizer-state dtype); NeMo's
        # setup_optimization (megatron_base_model.py at r2.0.0rc1) sets store_params False when it equals the
        # model's bf16 (no separate master copy) and store_param_remainders True when it is fp32 (the fp32 master
        # kept as the bf16 param plus 16-bit remainders, 2 bytes per parameter less than a separate fp32 copy: not
        # a column here, so priced as a 4-byte master)
        bf16_state = m.get("optim_dtype") == "bf16"
        optim_note = ("optim.dtype bf16 (exp_avg/exp_avg_sq in bf16; store_params False as it equals the model dtype: "
                      "no master copy -> exp_avg_dtype bf16, master_weights 0)" if bf16_state else
                      "optim.dtype unset (fp32 optimizer states; store_param_remainders True: the fp32 master as the "
                      "bf16 parameter plus 16-bit remainders, priced as a 4-byte fp32 master, 2 bytes per parameter "
                      "more than it holds)")
        before = (earlier or {}).get(f"{name}/{gpus}", [])
        spread = ("; the page's earlier versions printed " + ", ".join(f"{v} ({when})" for when, v in before)
                  + " for the same plan" if before else "")
        notes = (
            f"Read (page, last version): {name}, #-GPUs {gpus}, GBS {gbs}, MBS {mbs}, sequence length {seq}, "
            f"TP {tp}, PP {pp}, CP {cp}, VP {vp}, Tokens/sec/GPU {tps} (the row's value{spread}), "
            f"Model TFLOP/sec/GPU {tflops} (derived by "
            f"NVIDIA from the same measured time with its model-FLOP formula, so not a second row); caption: FP8 "
            f"pretraining, container NeMo 24.07, system DGX-H100. "
            f"Derived: dp = GPUs/(TP*PP*CP) = {dp}; {n_micro} micro-batches per step; the implied step time "
            f"GBS*seq/(tokens/s/GPU*GPUs) = {step_s:.3f} s (the page gives no step time). vpp = VP (1 = no "
            f"interleaving). "
            f"From the launcher recipe of this model at NeMo-Framework-Launcher 24.07 ({m['yaml']}.yaml; the page "
            f"does not state it): {m['dims']}; {recompute_src}"
            + (f"; sequence_parallel {'True' if sp else 'False'}; ub_tp_comm_overlap "
               f"{'true' if m['tp_overlap'] else 'false'} (-> tp_overlap {tp_overlap})" if tp > 1 else "")
            + f"; {optim_note}; optimizer distributed_fused_adam with overlap_grad_sync and overlap_param_sync "
            "(optimizer states and master weights sharded over DP -> zero_stage 1); fp8 with fp8_hybrid (E4M3 forward, "
            "E5M2 backward, delayed scaling), as the H100 fp8 example scripts set it; the H100 example scripts "
            "pass +training.model.optim.grad_sync_dtype=bf16 (the nemo@24.07 stack's 2-byte gradient "
            "reduction). Attention: the launcher's conf/config.yaml at 24.07 exports NVTE_FUSED_ATTN=0 ('Disable "
            "cudnn FA until we've tested it more') into every job, so Transformer Engine 1.8 (the container's) "
            "skips cuDNN fused attention and runs the flash-attn package (FlashAttention-2) -> attention_kernel "
            "flash2 (the launcher's main branch enabled cuDNN attention for the GPT-3 175B example on 2024-07-17 "
            "and for all models on 2024-08-29, both after the 24.07 tag). Assumed: the published runs used these "
            "recipe defaults with the table's plan (the examples/training/llama/h100/*_fp8.sh scripts run exactly "
            "the table's Llama plans: 8 GPUs at GBS 128 for 7B/8B, 64 GPUs for 70B); whether vboost was raised "
            "for the last version is not stated; DGX H100 SXM 80 GB, 8 GPUs per node, 8x400 Gb/s InfiniBand (the "
            "catalog's standard server)."
        )
        out.append({
            "run_id": f"nemo24.07-h100-{name.lower()}-fp8-{gpus}gpu",
            "source": SOURCE.format(model=name, gpus=gpus),
            "source_url": PAGE_URL,
            "model": name, "arch": m["arch"], "layers": m["layers"], "hidden": m["hidden"], "heads": m["heads"],
            "kv_heads": m["kv"], "ffn_hidden": m["ffn"], "vocab": m["vocab"], "seq_len": seq,
            "moe_experts": "", "moe_topk": "", "gpu": "h100-sxm", "num_gpus": gpus, "gpus_per_node": 8,
            "tp": tp, "pp": pp, "vpp": vp, "dp": dp, "cp": cp, "ep": 1, "sp": sp, "zero_stage": 1,
            "recompute": m["recompute"], "micro_batch": mbs, "global_batch": gbs, "precision": "fp8",
            "framework": "nemo", "metric": "tokens_per_s_per_gpu", "value": tps, "notes": notes,
            "framework_version": "24.07", "model_preset": m["preset"], "tp_overlap": tp_overlap,
            "attention_kernel": ATTENTION, "exp_avg_dtype": "bf16" if bf16_state else "",
            "master_weights": "0" if bf16_state else "",
        })
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", required=True, help="a clone (or bare mirror) of NVIDIA/NeMo")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    earlier: dict[str, list[tuple[str, str]]] = {}
    for commit, when in EARLIER:
        for src in pretraining_rows(read_page(args.repo, commit)):
            key = f"{src['Model']}/{integer(src['#-GPUs'])}"
            earlier.setdefault(key, []).append((when, src["Tokens / sec / GPU"]))
    rows = convert(read_page(args.repo), earlier)
    with open(args.out, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\r\n")
        w.writeheader()
        w.writerows(rows)
    print(f"{len(rows)} rows -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
