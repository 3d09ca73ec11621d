"""The order in which each pipeline stage runs its forward and backward passes, as Megatron-LM's
schedules run them (megatron/core/pipeline_parallel/schedules.py):

- no pipelining (pp = 1): forward then backward, micro-batch by micro-batch;
- 1F1B (Narayanan et al., SC21): stage i runs min(p - i - 1, m) warm-up forwards, then alternates
  one forward and one backward, then drains the remaining backwards;
- interleaved 1F1B with v chunks per stage: (p - i - 1) * 2 + (v - 1) * p warm-up forwards over
  virtual micro-batches, taken in groups of p micro-batches per chunk (forwards chunk 0, 1, ...;
  backwards chunk v-1, v-2, ...), then 1F1B, then cool-down.

>>> [f"{ph}{c}.{k}" for ph, c, k in stage_order(2, 1, 3, 0)]
['F0.0', 'F0.1', 'B0.0', 'F0.2', 'B0.1', 'B0.2']
"""
from __future__ import annotations

from functools import lru_cache


def _virtual(k: int, p: int, v: int, forward: bool) -> tuple[int, int]:
    """(chunk, micro-batch) of the k-th virtual micro-batch of a stage."""
    in_group = k % (p * v)
    chunk = in_group // p
    if not forward:
        chunk = v - 1 - chunk
    mb = (k // (p * v)) * p + in_group % p
    return chunk, mb


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
    if m % p:
        raise ValueError(f"the interleaved schedule needs micro-batches ({m}) divisible by pp={p}")
    total = m * v
    warm = min((p - stage - 1) * 2 + (v - 1) * p, total)
    out = [("F", *_virtual(k, p, v, True)) for k in range(warm)]
    for k in range(total - warm):
        out.append(("F", *_virtual(warm + k, p, v, True)))
        out.append(("B", *_virtual(k, p, v, False)))
    out += [("B", *_virtual(k, p, v, False)) for k in range(total - warm, total)]
    return tuple(out)


def next_virtual(stage: int, chunk: int, p: int, v: int, forward: bool) -> tuple[int, int] | None:
    """(stage, chunk) a pass sends its output to: the next virtual stage going forward, the previous
    one going backward; None at the ends of the model."""
    vs = chunk * p + stage + (1 if forward else -1)
    if vs < 0 or vs >= p * v:
        return None
    return vs % p, vs // p
