"""Arithmetic that works alike on floats and on numpy arrays.

The schedule and memory formulas are written once, with these helpers where they branch or take a
max, so that ``predict`` runs them on the floats of one plan and ``search`` runs the very same code
on arrays holding thousands of plans. On floats each helper is exactly the builtin it replaces
(``maximum(a, b)`` is ``max(a, b)``), so a prediction does not change by a bit.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

# a float of one plan, or a numpy array of one value per plan (what these helpers take and give)
Num = Any


def _is_array(*xs: Any) -> bool:
    return any(isinstance(x, np.ndarray) for x in xs)


def maximum(a, b):
    """``max(a, b)`` on floats, element-wise on arrays."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.maximum(a, b)
    return max(a, b)


def minimum(a, b):
    """``min(a, b)`` on floats, element-wise on arrays."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.minimum(a, b)
    return min(a, b)


def logical_and(a, b):
    """``a and b`` on bools, element-wise on arrays."""
    if _is_array(a, b):
        return np.logical_and(a, b)
    return bool(a and b)


def where(cond, a, b):
    """``a if cond else b`` on a bool, element-wise on an array of conditions."""
    if _is_array(cond, a, b):
        return np.where(cond, a, b)
    return a if cond else b


def pick(index, values: Sequence):
    """``values[index]`` for an int; for an array of indices, row r takes ``values[index[r]][r]``."""
    if isinstance(index, np.ndarray):
        if index.size == 1:   # one plan (predict): no stacking
            v = values[int(index.flat[0])]
            return np.full(index.shape, v, dtype=float) if np.ndim(v) == 0 else np.asarray(v, dtype=float).reshape(
                index.shape)
        stacked = np.stack([np.broadcast_to(np.asarray(v, dtype=float), index.shape) for v in values])
        return np.take_along_axis(stacked, index[None, ...], axis=0)[0]
    return values[index]
