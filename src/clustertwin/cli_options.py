"""The options every job-describing command shares (predict, goodput, trace, sim, report, search):
one definition, so that a flag means the same everywhere."""
from __future__ import annotations

import typer

ModelOpt = typer.Option(None, "--model", "-m", help="catalog name or a YAML/JSON/HF config.json file [default: llama3-8b]")
GpuOpt = typer.Option(None, "--gpu", help="GPU preset, e.g. h100, a100-80gb [default: h100-sxm]")
NumGpusOpt = typer.Option(None, "--num-gpus", "-n", help="GPUs in the job [default: 64, or the cluster's size]")
GpnOpt = typer.Option(None, "--gpus-per-node", help="GPUs per node (default: the GPU's standard server)")
ClusterOpt = typer.Option(None, "--cluster", help="cluster preset or YAML/JSON file (instead of --gpu)")
PlanOpt = typer.Option(None, "--plan", "-p", help='e.g. "tp=8,pp=8,vpp=1,dp=16,cp=1,ep=1,sp=1,zero=1,recompute=selective"')
MicroBatchOpt = typer.Option(None, "--micro-batch", help="sequences per micro-batch")
GlobalBatchOpt = typer.Option(None, "--global-batch", help="sequences per iteration")
SeqLenOpt = typer.Option(None, "--seq-len", help="tokens per sequence")
PrecisionOpt = typer.Option(None, "--precision", help="bf16 | fp16 | fp8 | fp32")
FrameworkOpt = typer.Option("megatron", "--framework",
                            help="megatron | nemo | torchtitan | deepspeed | pytorch-eager | pytorch-compile")
