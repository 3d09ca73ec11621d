"""N, the contiguous micro-batches each chunk of an interleaved pipeline runs before the next.

N is p when the micro-batches are a multiple of p (Megatron's depth-first schedule); otherwise the
flexible schedule of the Llama 3 paper (arXiv 2407.21783 Sec. 3.3.2, Fig. 6: "allows setting N
flexibly ... can run an arbitrary number of micro-batches in each batch"), as Megatron-Core builds it
(schedules.py get_schedule_table, microbatch_group_size_per_vp_stage: N in [p, m], the remainder of
m / N either 0 or at least p, else "dependency bubbles"): the smallest such N, or all m when m < p
(fewer micro-batches than stages: one group). The pricing (schedule/step.py, memory.py) and the
replay's orders (sim/schedule.py) read it from here.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np


@lru_cache(maxsize=4096)
def microbatch_group(p: int, m: int) -> int:
    """N, the contiguous micro-batches each chunk runs before the next (the module's docstring).

    >>> microbatch_group(4, 8), microbatch_group(4, 6), microbatch_group(4, 3), microbatch_group(4, 13)
    (4, 6, 3, 7)
    >>> microbatch_group(4, 11)     # 11 = 6 + 5: N = 4 or 5 would leave 3 or 1, fewer than p
    6
    """
    if m <= p or m % p == 0:
        return min(p, m)
    return next(n for n in range(p, m + 1) if m % n == 0 or m % n >= p)


def microbatch_groups(p: int, m):
    """``microbatch_group`` of ``m`` micro-batches, an int or an array of them (many plans)."""
    if np.ndim(m) == 0:
        return microbatch_group(p, int(m))
    values, index = np.unique(np.asarray(m), return_inverse=True)   # a search holds few distinct counts
    return np.array([microbatch_group(p, int(x)) for x in values])[index].reshape(np.shape(m))
