"""The order in which each pipeline stage runs its forward and backward passes, as Megatron-LM's
schedules run them (megatron/core/pipeline_parallel/schedules.py):

- no pipelining (pp = 1): forward then backward, micro-batch by micro-batch;
- 1F1B (Narayanan et al., SC21): stage i runs min(p - i - 1, m) warm-up forwards, then alternates
  one forward and one backward, then drains the remaining backwards;
- interleaved 1F1B with v chunks per stage: (p - i - 1) * 2 + (v - 1) * N warm-up forwards over
  virtual micro-batches, taken in groups of N contiguous micro-batches per chunk (forwards chunk 0,
  1, ...; backwards chunk v-1, v-2, ...), then 1F1B, then cool-down. N (``microbatch_group``) is p
  when the micro-batches are a multiple of p (Megatron's depth-first schedule); otherwise the
  flexible schedule of the Llama 3 paper (arXiv 2407.21783 Sec. 3.3.2, Fig. 6: "allows setting N
  flexibly ... can run an arbitrary number of micro-batches in each batch"), as Megatron-Core
  builds it (schedules.py get_schedule_table and get_pp_rank_microbatches, microbatch_group_size_per_vp_stage:
  groups of N micro-batches, the last one holding the rest, warm-up (p - i - 1) * 2 + (v - 1) * N;
  N in [p, m], the remainder of m / N either 0 or at least p, else "dependency bubbles"): the
  smallest such N, or all m when m < p (fewer micro-batches than stages: one group).

>>> [f"{ph}{c}.{k}" for ph, c, k in stage_order(2, 1, 3, 0)]
['F0.0', 'F0.1', 'B0.0', 'F0.2', 'B0.1', 'B0.2']
"""
from __future__ import annotations

from functools import lru_cache

from ..schedule.groups import microbatch_group, microbatch_groups  # noqa: F401  (re-exported)


@lru_cache(maxsize=512)
def _table(p: int, v: int, m: int) -> tuple[tuple[int, int], ...]:
    """(chunk, micro-batch) of each virtual micro-batch of a stage's forwards, in order."""
    n = microbatch_group(p, m)
    return tuple((c, i) for start in range(0, m, n) for c in range(v) for i in range(start, min(start + n, m)))


def _virtual(k: int, p: int, v: int, m: int, forward: bool) -> tuple[int, int]:
    """(chunk, micro-batch) of the k-th virtual micro-batch of a stage."""
    chunk, mb = _table(p, v, m)[k]
    return (chunk if forward else v - 1 - chunk), mb


@lru_cache(maxsize=512)
def stage_order(p: int, v: int, m: int, stage: int) -> tuple[tuple[str, int, int], ...]:
    """The passes stage ``stage`` runs, in order: ("F" | "B", chunk, micro-batch)."""
    if p == 1:
        if v != 1:
            raise ValueError("virtual chunks need a pipeline")
        return tuple(x for k in range(m) for x in (("F", 0, k), ("B", 0, k)))
    if v == 1:
        warm = min(p - stage - 1, m)
        out = [("F", 0, k) for k in range(warm)]
        for k in range(m - warm):
            out += [("F", 0, warm + k), ("B", 0, k)]
        out += [("B", 0, k) for k in range(m - warm, m)]
        return tuple(out)
    total = m * v
    warm = min((p - stage - 1) * 2 + (v - 1) * microbatch_group(p, m), total)
    out = [("F", *_virtual(k, p, v, m, True)) for k in range(warm)]
    for k in range(total - warm):
        out.append(("F", *_virtual(warm + k, p, v, m, True)))
        out.append(("B", *_virtual(k, p, v, m, False)))
    out += [("B", *_virtual(k, p, v, m, False)) for k in range(total - warm, total)]
    return tuple(out)


def next_virtual(stage: int, chunk: int, p: int, v: int, forward: bool) -> tuple[int, int] | None:
    """(stage, chunk) a pass sends its output to: the next virtual stage going forward, the previous
    one going backward; None at the ends of the model."""
    vs = chunk * p + stage + (1 if forward else -1)
    if vs < 0 or vs >= p * v:
        return None
    return vs % p, vs // p
