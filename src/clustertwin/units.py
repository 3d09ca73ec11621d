"""Quantities with units, parsed at the edge: "80GB", "80GiB", "3.35TB/s", "400Gbps", "989TFLOPS",
"1.5e12", "15T" (tokens), "30min". Inside clustertwin everything is SI: bytes, bytes/s, FLOP/s, s.

>>> parse_quantity("400Gbps", "bandwidth")
50000000000.0
>>> parse_quantity("80GiB", "bytes")
85899345920.0
"""
from __future__ import annotations

import math
import numbers
import re
from typing import Literal

from .errors import UnitError

Kind = Literal["bytes", "bandwidth", "flops", "count", "duration", "power", "latency", "frequency"]

_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60}
_COUNT = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12, "P": 1e15}
_DURATION = {
    "": 1.0, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "ms": 1e-3, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ns": 1e-9,  # micro sign and Greek mu
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
}
# ASCII digits only: \d would also take other scripts' digits, which float() happens to read.
_NUMBER = re.compile(r"^\s*([+-]?(?:[0-9]+(?:_[0-9]+)*(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*(.*?)\s*$")
_PREFIX = r"(Ki|Mi|Gi|Ti|Pi|Ei|k|K|M|G|T|P|E|)"

_HINT = {
    "bytes": 'e.g. "80GB", "80GiB" or 85899345920',
    "bandwidth": 'e.g. "3.35TB/s", "400Gbps" or "50GB/s"',
    "flops": 'e.g. "989TFLOPS" or 9.89e14',
    "count": 'e.g. "15T", "1.5e12" or "300B"',
    "duration": 'e.g. "30min", "2h", "90s"',
    "power": 'e.g. "700W" or "1kW"',
    "latency": 'e.g. "5us", "2.5us" or 5e-6',
    "frequency": 'e.g. "1410MHz" or "1.41GHz"',
}


def _prefix_scale(prefix: str) -> float | None:
    if prefix in _BINARY:
        return _BINARY[prefix]
    if prefix in _DECIMAL:
        return _DECIMAL[prefix]
    return None


def _scale(unit: str, kind: Kind) -> float | None:
    """Multiplier from ``unit`` to the SI unit of ``kind``; None if the unit does not fit."""
    u = "".join(unit.split())
    if kind == "count":
        u = re.sub(r"(?i)tokens?$", "", u)
        return _COUNT.get(u)
    if kind in ("duration", "latency"):
        return _DURATION.get(u) if u in _DURATION else _DURATION.get(u.lower())
    if kind == "power":
        m = re.fullmatch(r"([kKMG]?)W?", u)
        return _DECIMAL[m.group(1)] if m else None
    if kind == "frequency":
        m = re.fullmatch(r"([kKMG]?)(?i:hz)?", u)
        return _DECIMAL[m.group(1)] if m and (m.group(1) or u.lower() == "hz" or not u) else None
    if kind == "flops":
        m = re.fullmatch(r"(k|K|M|G|T|P|E|)(?:(?i:flop(?:/?s)?))?", u)
        return _DECIMAL[m.group(1)] if m else None
    if kind == "bytes":
        m = re.fullmatch(_PREFIX + r"(B|bytes?|)", u)
        return _prefix_scale(m.group(1)) if m else None
    if kind == "bandwidth":
        # bytes per second: GB/s, GBps, GiB/s, Gbytes/s; bits per second: Gb/s, Gbps, Gbit/s
        m = re.fullmatch(_PREFIX + r"(B|bytes?|b|bits?)(?:/s|ps|/sec)", u)
        if not m:
            m2 = re.fullmatch(_PREFIX, u)
            return _prefix_scale(m2.group(1)) if m2 else None
        scale = _prefix_scale(m.group(1))
        if scale is None:
            return None
        is_bits = m.group(2) in ("b", "bit", "bits")
        return scale / 8.0 if is_bits else scale
    return None


def _apply(number: float, scale: float) -> float:
    # Sub-unit scales (ms, us, ns, bits) divide by an exact integer so "5us" is exactly 5e-6.
    if 0 < scale < 1:
        return number / round(1.0 / scale)
    return number * scale


def parse_quantity(value: object, kind: Kind, field: str = "value") -> float:
    """Parse a number or a string with a unit into SI units of ``kind``.

    Raises UnitError (one line naming ``field``) for anything that is not a finite, non-negative
    quantity of that kind. Plain numbers (and strings without a unit) are taken as SI already.
    """
    hint = _HINT.get(kind, "")
    if isinstance(value, bool):
        raise UnitError(field, f"expected a quantity, got {value!r}", hint)
    if isinstance(value, numbers.Real):  # int, float, numpy scalars, Fraction
        try:
            number = float(value)
        except (OverflowError, ValueError, TypeError):
            raise UnitError(field, f"{_short(value)} is not a finite number", hint) from None
    elif isinstance(value, str):
        m = _NUMBER.match(value)
        if not m:
            raise UnitError(field, f"cannot read {_short(value)} as a quantity", hint)
        scale = _scale(m.group(2), kind)
        if scale is None:
            raise UnitError(field, f"unknown unit {_short(m.group(2))} in {_short(value)}", hint)
        number = _apply(float(m.group(1).replace("_", "")), scale)
    else:
        raise UnitError(field, f"expected a number or a string, got {type(value).__name__}", hint)
    if not math.isfinite(number):
        raise UnitError(field, f"{_short(value)} is not a finite number", hint)
    if number < 0:
        raise UnitError(field, f"{_short(value)} is negative", "give a positive quantity")
    return number + 0.0  # -0.0 -> 0.0


def has_unit(value: object) -> bool:
    """Whether ``value`` is a string that carries a unit ("400Gbps": yes; 400 or "400": no)."""
    if not isinstance(value, str):
        return False
    m = _NUMBER.match(value)
    return bool(m and m.group(2))


def _short(value: object, limit: int = 60) -> str:
    try:
        text = repr(value)
    except Exception:  # e.g. an int too long for str() (Python's digit limit)
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_si(value: float, unit: str, binary: bool = False, digits: int = 3) -> str:
    """Human-readable quantity: format_si(8.5e10, "B") -> "85 GB"."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g} {unit}"
    base = 1024.0 if binary else 1000.0
    prefixes = ["", "K", "M", "G", "T", "P", "E"] if not binary else ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
    if not binary:
        prefixes[1] = "k"
    i = 0
    v = abs(value)
    while v >= base and i < len(prefixes) - 1:
        v /= base
        i += 1
    return f"{math.copysign(v, value):.{digits}g} {prefixes[i]}{unit}"


def format_duration(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds / 86400:.3g} days"
