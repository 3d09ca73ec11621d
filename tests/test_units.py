"""parse_quantity: hand-checked examples and property tests (hypothesis)."""
from __future__ import annotations

import doctest
import math
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import clustertwin.units as units
from clustertwin.errors import SpecError, UnitError
from clustertwin.units import format_duration, format_si, parse_quantity

KINDS = ["bytes", "bandwidth", "flops", "count", "duration", "power", "latency"]

EXAMPLES = [
    ("80GB", "bytes", 80e9),
    ("80GiB", "bytes", 80 * 2**30),
    ("80 GiB", "bytes", 85_899_345_920),
    ("1.5TB", "bytes", 1.5e12),
    ("512MiB", "bytes", 512 * 2**20),
    ("141 GB", "bytes", 141e9),
    ("1024", "bytes", 1024),
    ("1KiB", "bytes", 1024),
    ("1kB", "bytes", 1000),
    ("3.35TB/s", "bandwidth", 3.35e12),
    ("400Gbps", "bandwidth", 50e9),
    ("400 Gb/s", "bandwidth", 50e9),
    ("400Gbit/s", "bandwidth", 50e9),
    ("50GB/s", "bandwidth", 50e9),
    ("50GBps", "bandwidth", 50e9),
    ("64 GB/s", "bandwidth", 64e9),
    ("1GiB/s", "bandwidth", 2**30),
    ("50 bytes/s", "bandwidth", 50),          # bytes, not bits (was divided by 8)
    ("5 Gbytes/s", "bandwidth", 5e9),
    ("8 b/s", "bandwidth", 1),
    ("989TFLOPS", "flops", 989e12),
    ("989 TFLOP/s", "flops", 989e12),
    ("989.5TFLOPS", "flops", 989.5e12),
    ("1979 TFLOPs", "flops", 1979e12),
    ("2.5PFLOPS", "flops", 2.5e15),
    ("9.89e14", "flops", 9.89e14),
    ("1.5e12", "count", 1.5e12),
    ("15T", "count", 15e12),
    ("15T tokens", "count", 15e12),
    ("300B", "count", 300e9),
    ("300B tokens", "count", 300e9),
    ("2M", "count", 2e6),
    ("1_000_000", "count", 1e6),
    ("30min", "duration", 1800),
    ("2h", "duration", 7200),
    ("90s", "duration", 90),
    ("1.5 days", "duration", 129600),
    ("250ms", "duration", 0.25),
    ("5us", "latency", 5e-6),
    ("2.5us", "latency", 2.5e-6),
    ("5µs", "latency", 5e-6),                 # micro sign
    ("5μs", "latency", 5e-6),                 # Greek mu
    ("800ns", "latency", 8e-7),
    ("5e-6", "latency", 5e-6),
    ("700W", "power", 700),
    ("700", "power", 700),               # no unit: SI (was rejected)
    ("1kW", "power", 1000),
    ("1.2 kW", "power", 1200),
    ("  42  ", "count", 42),
    ("+7GB", "bytes", 7e9),
    (".5GB", "bytes", 0.5e9),
    ("0", "bytes", 0),
]


@pytest.mark.parametrize("text,kind,expected", EXAMPLES)
def test_examples(text: str, kind: str, expected: float) -> None:
    assert parse_quantity(text, kind) == pytest.approx(expected, rel=1e-12)


def test_small_units_are_exact() -> None:
    assert parse_quantity("5us", "latency") == 5e-6
    assert parse_quantity("3ms", "duration") == 3e-3
    assert parse_quantity("7ns", "latency") == 7e-9


@pytest.mark.parametrize("value,kind,expected", [
    (80e9, "bytes", 80e9), (400, "bandwidth", 400), (7, "count", 7.0), (Fraction(1, 4), "duration", 0.25),
])
def test_numbers_are_si(value: object, kind: str, expected: float) -> None:
    assert parse_quantity(value, kind) == expected


def test_numpy_scalars() -> None:
    np = pytest.importorskip("numpy")
    assert parse_quantity(np.int64(5), "count") == 5.0
    assert parse_quantity(np.float32(2.5), "bytes") == 2.5


@pytest.mark.parametrize("text,kind", [
    ("80 Gb", "bytes"),          # bits are not bytes
    ("80GB/h", "bandwidth"),
    ("989TFLOPS", "bytes"),
    ("15X", "count"),
    ("700V", "power"),
    ("GB", "bytes"),
    ("", "bytes"),
    ("1e", "count"),
    ("1..2", "count"),
    ("1__0", "count"),
    ("٣GB", "bytes"),            # non-ASCII digits
    ("nan", "bytes"),
    ("inf", "flops"),
    ("-inf", "flops"),
    ("1e999", "count"),
    ("1e400GB", "bytes"),
    ("-5GB", "bytes"),
    ("5GB\nfoo", "bytes"),
])
def test_rejected(text: str, kind: str) -> None:
    with pytest.raises(UnitError) as e:
        parse_quantity(text, kind, field="gpu.hbm")
    assert e.value.one_line().startswith("gpu.hbm: ")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("value", [True, False, None, [80], {"a": 1}, b"80GB", 10**400, 10**5000,
                                   Fraction(10**400, 3), float("nan"), float("inf"), -1, -0.5],
                         ids=lambda v: type(v).__name__)
def test_rejected_objects(value: object) -> None:
    with pytest.raises(UnitError) as e:
        parse_quantity(value, "bytes", field="hbm_bytes")
    assert e.value.field == "hbm_bytes"
    assert "\n" not in str(e.value)


def test_unit_error_is_spec_error() -> None:
    assert issubclass(UnitError, SpecError)


def test_negative_zero_normalised() -> None:
    r = parse_quantity("-0", "bytes")
    assert r == 0 and math.copysign(1, r) == 1
    assert math.copysign(1, parse_quantity(-0.0, "bytes")) == 1


def test_format_helpers() -> None:
    assert format_si(8.5e10, "B") == "85 GB"
    assert format_si(2**30, "B", binary=True) == "1 GiB"
    assert format_si(0, "B") == "0 B"
    assert format_duration(5e-6) == "5 µs"
    assert format_duration(90) == "90 s"
    assert format_duration(1800) == "30 min"
    assert format_duration(7200) == "2 h"
    assert format_duration(10 * 86400) == "10 days"


def test_doctests() -> None:
    assert doctest.testmod(units).failed == 0


# ---- properties ------------------------------------------------------------------------------------

UNIT_ALPHABET = st.sampled_from(list("0123456789.eE+-_ /kKMGTPEiBbsWpFLOPSminhdu µμ\t\n") + ["tokens", "FLOPS",
                                                                                             "Gbps", "GiB", "nan"])
TEXT = st.one_of(st.text(max_size=40), st.lists(UNIT_ALPHABET, max_size=12).map("".join))


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXT, kind=st.sampled_from(KINDS))
def test_arbitrary_text_only_unit_error(text: str, kind: str) -> None:
    try:
        result = parse_quantity(text, kind, field="f")
    except UnitError as e:
        assert "\n" not in str(e) and e.field == "f"
    else:
        assert math.isfinite(result) and result >= 0


@settings(max_examples=1000, deadline=None)
@given(value=st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.fractions(), st.binary(),
                       st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(),
                                                                            max_size=2)),
       kind=st.sampled_from(KINDS))
def test_arbitrary_objects_only_unit_error(value: object, kind: str) -> None:
    try:
        result = parse_quantity(value, kind, field="f")
    except UnitError as e:
        assert "\n" not in str(e)
    else:
        assert math.isfinite(result) and result >= 0


# unit spellings per kind and the factor each stands for
SPELLINGS: dict[str, list[tuple[str, float]]] = {
    "bytes": [(p + u, s) for p, s in [("", 1), ("k", 1e3), ("K", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12),
                                      ("P", 1e15), ("E", 1e18), ("Ki", 2**10), ("Mi", 2**20), ("Gi", 2**30),
                                      ("Ti", 2**40), ("Pi", 2**50), ("Ei", 2**60)]
              for u in ("B", "bytes")] + [("", 1)],
    "bandwidth": [(p + u, s * f) for p, s in [("", 1), ("k", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12), ("P", 1e15),
                                              ("Gi", 2**30), ("Ti", 2**40)]
                  for u, f in [("B/s", 1), ("Bps", 1), ("b/s", 1 / 8), ("bps", 1 / 8), ("bit/s", 1 / 8),
                               ("bytes/s", 1)]],
    "flops": [(p + u, s) for p, s in [("", 1), ("k", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12), ("P", 1e15),
                                      ("E", 1e18)]
              for u in ("FLOPS", "FLOP/s", "FLOPs", "flops", "")],
    "count": [(p + u, s) for p, s in [("", 1), ("k", 1e3), ("K", 1e3), ("M", 1e6), ("B", 1e9), ("G", 1e9),
                                      ("T", 1e12), ("P", 1e15)]
              for u in ("", " tokens", "tokens", " token")],
    "duration": [("s", 1), ("sec", 1), ("ms", 1e-3), ("us", 1e-6), ("µs", 1e-6), ("ns", 1e-9), ("min", 60),
                 ("m", 60), ("minutes", 60), ("h", 3600), ("hours", 3600), ("d", 86400), ("days", 86400), ("", 1)],
    "power": [("W", 1), ("kW", 1e3), ("KW", 1e3), ("MW", 1e6), ("GW", 1e9), ("", 1)],
}
SPELLINGS["latency"] = SPELLINGS["duration"]
CASES = [(k, u, s) for k, spellings in SPELLINGS.items() for u, s in spellings]


@settings(max_examples=1000, deadline=None)
@given(x=st.floats(min_value=1e-300, max_value=1e250, allow_nan=False, allow_infinity=False),
       case=st.sampled_from(CASES), space=st.sampled_from(["", " "]),
       style=st.sampled_from(["repr", "e", "g", "f"]))
def test_round_trip(x: float, case: tuple[str, str, float], space: str, style: str) -> None:
    kind, unit, scale = case
    number = {"repr": repr(x), "e": f"{x:.17e}", "g": f"{x:.17g}", "f": f"{x:.6f}"}[style]
    if style == "f":
        x = float(number)
        if x == 0:
            return
    text = f"{number}{space}{unit}"
    got = parse_quantity(text, kind)  # type: ignore[arg-type]
    expected = x * scale
    assert math.isclose(got, expected, rel_tol=1e-9), (text, got, expected)


@settings(max_examples=1000, deadline=None)
@given(bad=st.one_of(st.floats(max_value=-1e-300, allow_nan=False, allow_infinity=True),
                     st.just(float("nan")), st.just(float("inf")), st.integers(max_value=-1)),
       case=st.sampled_from(CASES), as_text=st.booleans(), field=st.from_regex(r"[a-z_.]{1,20}", fullmatch=True))
def test_negative_nan_inf_rejected(bad: float, case: tuple[str, str, float], as_text: bool, field: str) -> None:
    kind, unit, _ = case
    value: object = f"{bad!r}{unit}" if as_text else bad
    with pytest.raises(UnitError) as e:
        parse_quantity(value, kind, field=field)  # type: ignore[arg-type]
    assert e.value.field == field
    assert e.value.one_line().startswith(f"{field}: ")
    assert "\n" not in str(e.value)
