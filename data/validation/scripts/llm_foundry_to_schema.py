"""Convert MosaicML llm-foundry's MPT training benchmark tables into clustertwin's validation schema.

Source: mosaicml/llm-foundry (Apache-2.0), scripts/train/benchmarking/README.md at commit
495218376830947dce625efabc4d86be7c47cc45 (2024-04-22; the tables are unchanged since 5e85bd62 of
2024-01-06, and this is the file's content at the repository's newest commit as well). Five tables of
measured MPT runs (Composer + PyTorch FSDP) on A100 40GB / 80GB and H100 80GB.

What the run settings are read from (nothing else is used; each row's notes say which):
  scripts/train/benchmarking/submit_benchmarks.py  @b2a43a14 (2023-10-19) and @5e85bd62 (2024-01-06):
      mod_parameters sets attn_impl (argument default 'triton'), norm_type 'low_precision_layernorm';
      fc_type 'te' on H100 under fp8; pip_install '-e .[gpu]' (b2a43a14) / '.[gpu-flash2]' (5e85bd62);
      fp8 runs install flash-attn==1.0.7 and TransformerEngine v0.10
  scripts/train/benchmarking/sweep.py              @5e85bd62: the "Large Scale" runs (attn_impl flash for
      1b/3b/7b/70b, triton for 13b/30b; limit_all_gathers, forward_prefetch, backward_prefetch BACKWARD_PRE)
  scripts/train/benchmarking/collect_results.py    @b2a43a14: what the columns are (samples/s from Composer's
      speed monitor; MFU = (6 N + 12 L d s) tokens/s / peak, N = NumParams)
  scripts/train/yamls/pretrain/mpt-<size>.yaml     @b2a43a14: d_model, n_heads, n_layers, expansion_ratio 4,
      vocab_size 50368, decoupled_adamw, gradient clipping, FSDP config
  llmfoundry/models/mpt/configuration_mpt.py       @b2a43a14: defaults no_bias False, learned_pos_emb True,
      alibi False, attn_impl triton, norm_type low_precision_layernorm, tied embeddings
  llmfoundry/models/mpt/modeling_mpt.py            @b2a43a14: loss_fn default 'fused_crossentropy'
      (flash_attn.losses.cross_entropy), logits through the shared (tied) token embedding

Columns after `notes`: model_preset (empty), framework_version (the table's date: 2023-04, 2023-10 or 2024-01),
compile (0), attention_kernel (flash2), attention_impl (llm-foundry's attn_impl: triton or flash-attn, which picks
the stack llm-foundry-triton or llm-foundry-flash), grad_reduce_dtype (fp32 under FSDP mixed_precision DEFAULT,
bf16 under PURE), tied_embeddings (1) and dropout (0).

The script checks each row's published NumParams against the parameter count of the architecture it
writes (biases, learned positions, tied embeddings): a mismatch stops it.

Re-run (from the clustertwin repository root):
  git clone https://github.com/mosaicml/llm-foundry ../llm-foundry     # or any clone / bare mirror
  python data/validation/scripts/llm_foundry_to_schema.py --repo ../llm-foundry \
      --out data/validation/llm_foundry_runs.csv
Reads the files with `git show <commit>:<path>`; needs only the Python standard library and git.
"""
from __future__ import annotations

import argparse
import csv
import io
import re
import subprocess
import sys

COMMIT = "495218376830947dce625efabc4d86be7c47cc45"
SETTINGS_COMMIT = "b2a43a1477a45f40f4086a1c72f851b0ab42d0ac"      # 2023-10-19, "Update_pretrain_benchmarks (#543)"
LARGE_SCALE_COMMIT = "5e85bd62d4ec9e13353ca95877477602ab538e5b"   # 2024-01-06, "Shashank/new benchmarks (#838)"
EARLY_COMMIT = "300cc5c58b7a44ad4fd9556e170c618ae8b09a4c"          # 2023-05-03, the PURE rows already there
REPO_URL = "https://github.com/mosaicml/llm-foundry"
README = "scripts/train/benchmarking/README.md"
YAML = "scripts/train/yamls/pretrain/mpt-{}.yaml"

COLUMNS = ["run_id", "source", "source_url", "model", "arch", "layers", "hidden", "heads", "kv_heads",
           "ffn_hidden", "vocab", "seq_len", "moe_experts", "moe_topk", "gpu", "num_gpus", "gpus_per_node",
           "tp", "pp", "vpp", "dp", "cp", "ep", "sp", "zero_stage", "recompute", "micro_batch", "global_batch",
           "precision", "framework", "metric", "value", "notes", "model_preset", "framework_version", "compile",
           "attention_kernel", "attention_impl", "grad_reduce_dtype", "tied_embeddings", "dropout"]

GPU = {"a100_40gb": "a100-40gb", "a100_80gb": "a100-80gb", "h100_80gb": "h100-sxm"}
SHARDING = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2}
# Large Scale runs (sweep.py @5e85bd62): attn_impl per model yaml
LARGE_SCALE_ATTN = {"1b": "flash", "3b": "flash", "7b": "flash", "13b": "triton", "30b": "triton", "70b": "flash"}

ARCH_NOTE = ("MPT as llm-foundry's pretrain yamls and MPTConfig defaults build it (@b2a43a14): LayerNorm run in the "
             "16-bit dtype (norm_type low_precision_layernorm, set by submit_benchmarks.py: F.layer_norm with "
             "autocast off, one kernel), GELU MLP with expansion_ratio 4 (MPTMLP: up_proj, nn.GELU(approximate="
             "'none'), down_proj), biases on every Linear and LayerNorm (no_bias defaults False and the yamls do not "
             "set it), learned position embeddings (learned_pos_emb True, alibi False: the published MPT-7B's ALiBi "
             "and no-bias settings are NOT what these benchmark yamls ran), output head tied to the token embedding "
             "(SharedEmbedding) -> arch gpt with tied_embeddings 1; the parameter count of that architecture equals "
             "the table's NumParams {nparams} exactly. Vocab 50368 (yaml vocab_size, a multiple of 64). Dropout 0 "
             "(MPTConfig attn_pdrop/resid_pdrop/emb_pdrop default 0.0; the yamls do not set them) -> dropout 0. Loss: "
             "llm-foundry's default loss_fn fused_crossentropy (flash_attn.losses.cross_entropy, a Triton kernel: "
             "the stack's fused loss). Optimizer decoupled_adamw (Composer DecoupledAdamW) with gradient clipping "
             "by norm 1.0.")


def git_show(repo: str, commit: str, path: str) -> str:
    return subprocess.run(["git", "-C", repo, "show", f"{commit}:{path}"], check=True, capture_output=True,
                          text=True).stdout


def yaml_dims(text: str) -> dict[str, int]:
    dims = {}
    for key in ("d_model", "n_heads", "n_layers", "expansion_ratio", "vocab_size"):
        m = re.search(rf"^\s+{key}:\s*(\d+)", text, re.M)
        if not m:
            raise SystemExit(f"{key} not found in a pretrain yaml")
        dims[key] = int(m.group(1))
    return dims


def mpt_params(d: dict[str, int], seq: int) -> int:
    """Parameters of MPT with biases, learned positions, tied embeddings (MPTModel, no_bias False)."""
    h, r = d["d_model"], d["expansion_ratio"]
    per_layer = (4 * h * h + 4 * h) + (2 * r * h * h + r * h + h) + 2 * (2 * h)   # attn, MLP, two LayerNorms
    return d["n_layers"] * per_layer + d["vocab_size"] * h + seq * h + 2 * h


def tables(readme: str):
    """(section title, list of row dicts) for each results table."""
    section, header = None, None
    for line in readme.splitlines():
        if line.startswith("## "):
            section, header = line[3:].strip(), None
            continue
        if not line.startswith("|") or section is None:
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "Model":
            header = cells
            continue
        if header is None or set(cells[0]) <= {"-", " "}:
            continue
        yield section, dict(zip(header, cells))


def table_context(section: str, row: dict) -> tuple[str, str, str]:
    """(framework_version, software note, attention impl) of a table's rows."""
    mp = row["MP Mode"]
    if section.startswith("H100 80GB BF16 (Large Scale"):
        attn = LARGE_SCALE_ATTN[row["Model"]]
        return ("2024-01", f"Table added by {LARGE_SCALE_COMMIT[:8]} (2024-01-06); its runs are sweep.py's: "
                f"attn_impl {attn} for mpt-{row['Model']}, limit_all_gathers true, forward_prefetch true, "
                "backward_prefetch BACKWARD_PRE, llm-foundry installed with '.[gpu-flash2]' (FlashAttention-2); "
                "sweep.sh's image mosaicml/pytorch:2.1.0_cu121 (torch 2.1).", attn)
    if mp == "PURE":
        return ("2023-04", f"Row already in the table at {EARLY_COMMIT[:8]} (2023-05-03, moved from the examples "
                "repository; measured before then): submit_benchmarks.py's defaults of that time, image "
                "mosaicml/pytorch:1.13.1_cu117 (torch 1.13), attn_impl 'triton', fsdp mixed_precision PURE.",
                "triton")
    fp8 = "FP8" in section
    return ("2023-10", f"Table (re)measured in {SETTINGS_COMMIT[:8]} (2023-10-19): submit_benchmarks.py defaults "
            "attn_impl 'triton', llm-foundry installed with '-e .[gpu]'; sweep.sh's image "
            "mosaicml/pytorch:2.1.0_cu121 (torch 2.1)"
            + ("; fp8 runs: fc_type 'te' (Transformer Engine te.Linear for every Linear of the blocks), "
               "pip install flash-attn==1.0.7 and TransformerEngine v0.10 (submit_benchmarks.py)." if fp8 else "."),
            "triton")


def convert(repo: str) -> list[dict]:
    readme = git_show(repo, COMMIT, README)
    dims = {s: yaml_dims(git_show(repo, SETTINGS_COMMIT, YAML.format(s)))
            for s in ("125m", "350m", "760m", "1b", "3b", "7b", "13b", "30b", "70b")}
    url = f"{REPO_URL}/blob/{COMMIT}/{README}"
    out, seen = [], {}
    for section, r in tables(readme):
        size, seq, gpus = r["Model"], int(r["SeqLen (T)"]), int(r["# GPUs"])
        d = dims[size]
        nparams = int(r["NumParams"])
        if mpt_params(d, seq) != nparams:
            raise SystemExit(f"{section} {size} s{seq}: NumParams {nparams} != {mpt_params(d, seq)}")
        mb, accum, gb = int(r["MicroBatchSize"]), int(r["GradAccum"]), int(r["GlobalBatchSize"])
        version, software, attn = table_context(section, r)
        fp8 = r["Precision"] == "amp_fp8"
        zero = SHARDING[r["Sharding Strategy"]]
        ckpt = r["Activation Checkpointing"] == "True"
        gpu = GPU[r["GPU"]]
        batch_note = (f"global batch {gb} = micro-batch {mb} x grad accum {accum} x {gpus} GPUs"
                      if mb * accum * gpus == gb else
                      f"global batch {gb} samples with micro-batch {mb} and grad accum {accum} on {gpus} GPUs "
                      f"({mb}x{accum}x{gpus} = {mb * accum * gpus} != {gb}: Composer splits the device batch "
                      f"{gb // gpus} into micro-batches of at most {mb}; global_batch is the published value)")
        attn_note = ("attn_impl flash: FlashAttention-2 (flash_attn 2.x through '.[gpu-flash2]') -> attention_kernel "
                     "flash2, attention_impl flash-attn (stack llm-foundry-flash)" if attn == "flash" else
                     "attn_impl triton: llm-foundry's Triton FlashAttention (llmfoundry/models/layers/"
                     "flash_attn_triton.py, a port of FlashAttention-1 on triton_pre_mlir whose docstring says "
                     "'Overall Triton forward + backward is slightly slower than CUDA forward + backward') -> "
                     "attention_kernel flash2, attention_impl triton (stack llm-foundry-triton: FA2's tiling at "
                     "FlashAttention-1's speed)")
        mp = r["MP Mode"]
        reduce = "bf16" if mp == "PURE" else "fp32"
        mp_note = (f"FSDP mixed_precision {mp} (Composer's get_mixed_precision, "
                   + ("composer/trainer/mosaic_fsdp.py of v0.13.4, the Composer llm-foundry pinned in 2023-05: "
                      "PURE = param, reduce and buffer dtype bf16 -> gradients reduce-scattered in bf16"
                      if mp == "PURE" else
                      "composer/trainer/mosaic_fsdp_utils.py of v0.16.4 / v0.17.2, the Composer llm-foundry's "
                      "setup.py pins at b2a43a14 (>=0.16.4,<0.17) / 5e85bd62 (>=0.17.2,<0.18): DEFAULT = param "
                      "and buffer dtype bf16, reduce dtype fp32 -> gradients reduce-scattered in fp32")
                   + "); sharded flat parameters and AdamW states in fp32 (FSDP keeps the fp32 original; "
                   "4 + 4 + 8 bytes per parameter sharded).")
        notes = (
            f"Throughput (T/s/GPU) as published ({r['Throughput (T/s/GPU)']}), table '{section}'; the row also "
            f"gives MFU {r['MFU']}% (the README's formula: (6 N + 12 L d s) x tokens/s over the "
            f"{'fp8' if fp8 else 'bf16'} dense peak, N = NumParams {nparams} incl. embeddings), HFU {r['HFU']}%, "
            f"Throughput {r['Throughput (S/s)']} samples/s, {r['Throughput (T/s)']} tokens/s. Measurement "
            "(collect_results.py, submit_benchmarks.py): Composer's speed monitor throughput/samples_per_sec "
            "(window_size 10 batches) as last logged in a run of 30 batches, on the 'train_small' split; "
            f"T/s/GPU = samples/s x seq_len / GPUs. Model mpt-{size}.yaml: d_model {d['d_model']}, n_heads "
            f"{d['n_heads']}, n_layers {d['n_layers']}. {ARCH_NOTE.format(nparams=nparams)} {software} "
            f"{attn_note}. Plan: PyTorch FSDP through Composer, sharding {r['Sharding Strategy']} -> zero_stage "
            f"{zero}, dp = {gpus}, no TP/PP; one FSDP unit per MPTBlock (MPTModel.fsdp_wrap_fn) plus the root "
            f"(embedding, final norm). Activation checkpointing {r['Activation Checkpointing']} -> recompute "
            f"{'full (Composer checkpoints every MPTBlock: activation_checkpointing_fn)' if ckpt else 'none'}; "
            f"CPU offload {r['Activation CPUOffload']}. {mp_note} Precision {r['Precision']} -> "
            + ("fp8: TE v0.10 te.Linear under Composer's amp_fp8 (te.fp8_autocast, TE's default DelayedScaling "
               "recipe assumed); attention, norms, GELU, the tied output head and the loss stay bf16. " if fp8 else
               "bf16 (torch.autocast). ")
            + f"{batch_note}. Nodes: 8 GPUs per node; "
            + ("the table's heading gives 1600 Gbps node-to-node RoCE = the standard DGX A100's 8x200 Gb/s. "
               if gpu.startswith("a100") else
               "the H100 cluster's network is not stated: the standard DGX H100 (8x400 Gb/s) assumed. ")
            + "Not stated: dataloader/host, NCCL version; torch.compile off (b2a43a14: 'rm compile support in "
            "profiling')."
        )
        rid = f"llmfoundry-{gpu}-{'fp8' if fp8 else 'bf16'}-mpt-{size}-s{seq}-{gpus}gpu-mb{mb}-ga{accum}"
        if "Large Scale" in section:
            rid += "-largescale"
        seen[rid] = seen.get(rid, 0) + 1
        if seen[rid] > 1:
            raise SystemExit(f"duplicate run_id {rid}")
        out.append({
            "run_id": rid,
            "source": f"mosaicml/llm-foundry {README} @{COMMIT[:12]}, table '{section}': MPT-{size} seq {seq} on "
                      f"{gpus}x {r['GPU']}, micro-batch {mb}, grad accum {accum}",
            "source_url": url, "model": f"MPT-{size} (llm-foundry mpt-{size}.yaml)", "arch": "gpt",
            "layers": d["n_layers"], "hidden": d["d_model"], "heads": d["n_heads"], "kv_heads": d["n_heads"],
            "ffn_hidden": d["expansion_ratio"] * d["d_model"], "vocab": d["vocab_size"], "seq_len": seq,
            "moe_experts": "", "moe_topk": "", "gpu": gpu, "num_gpus": gpus, "gpus_per_node": 8,
            "tp": 1, "pp": 1, "vpp": 1, "dp": gpus, "cp": 1, "ep": 1, "sp": 0, "zero_stage": zero,
            "recompute": "full" if ckpt else "none", "micro_batch": mb, "global_batch": gb,
            "precision": "fp8" if fp8 else "bf16", "framework": "llm-foundry",
            "metric": "tokens_per_s_per_gpu", "value": int(r["Throughput (T/s/GPU)"]), "notes": notes,
            "model_preset": "", "framework_version": version, "compile": 0,
            "attention_kernel": "flash2", "attention_impl": "flash-attn" if attn == "flash" else "triton",
            "grad_reduce_dtype": reduce,
            "tied_embeddings": 1, "dropout": 0,
        })
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", required=True, help="a clone (or bare mirror) of mosaicml/llm-foundry")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    rows = convert(args.repo)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\r\n")
    w.writeheader()
    w.writerows(rows)
    with open(args.out, "w", newline="", encoding="utf-8") as f:
        f.write(buf.getvalue())
    print(f"{len(rows)} rows -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
