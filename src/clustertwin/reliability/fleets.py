"""Fleets: failure rates by component (fail-stop), fail-slow events, and the job MTTF they project.

A fleet is a ``FailureModel`` (fail-stop interruptions per unit-hour of each component class: GPU,
HBM, silent data corruption, software, NCCL timeouts, network switch/cable, NIC, host) plus a
fail-slow model (a node that keeps running but slower until it is found and drained) and a name for
how its framework initialises (``init_scaling``, see ``recovery.py``).

Job MTTF projection (fail-stop; Kokolis et al. 2025, arXiv 2410.21680, model the same way with one
node rate, "MTTF = 1 / (N_nodes r_f)")::

    MTTF(N) = 1 / sum_c r_c * u_c(N),   u_c(N) = N (per-GPU classes), N / g (per-node), N / g * k (per-NIC)

for N GPUs on nodes of g GPUs and k NICs: every class holds units in proportion to N, so
MTTF(N) = MTTF(N0) * N0 / N (the 1/N law).

>>> f = load_fleet("llama3-16k")
>>> round(f.job_mttf_s(16384, 8, 8) / 3600, 2)     # 54 days x 24 h / 419 interruptions
3.09
>>> round(load_fleet("meta-rsc").job_mttf_s(16384, 8, 8) / 3600, 2)   # Kokolis et al.: 1.8 h at 16K GPUs
1.8
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DataError, SpecError
from .failures import (LLAMA3_GPUS, LLAMA3_HOURS, LLAMA3_NICS, LLAMA3_NODES, LLAMA3_PLANNED, PRESETS, FailureModel,
                       failure_model_from_mapping, load_failure_model)


@dataclass(frozen=True)
class FailSlow:
    """Fail-slow events: a node keeps running ``slowdown`` slower until detected after ``detect_s`` and
    drained (by a restart, or a live migration)."""

    rate_per_node_hour: float = 0.0
    slowdown: float = 0.10
    detect_s: float = 600.0
    source: str = ""

    def job_rate_per_s(self, num_nodes: int) -> float:
        return self.rate_per_node_hour * num_nodes / 3600.0


@dataclass(frozen=True)
class Fleet:
    name: str
    source: str
    failure_model: FailureModel
    fail_slow: FailSlow = field(default_factory=FailSlow)
    init_scaling: str = "fixed"

    def job_rates_per_s(self, num_gpus: int, gpus_per_node: int, nics_per_node: int) -> dict[str, float]:
        """Fail-stop interruptions per second of each class for a job of ``num_gpus`` GPUs."""
        nodes = num_gpus / gpus_per_node
        units = {"gpu": float(num_gpus), "node": nodes, "nic": nodes * nics_per_node}
        fm = self.failure_model
        return {k: r * units[fm.unit_of(k)] / 3600.0 for k, r in fm.rates_per_unit_hour.items()}

    def job_mttf_s(self, num_gpus: int, gpus_per_node: int = 8, nics_per_node: int = 8) -> float:
        """Mean time to a fail-stop interruption of a job of ``num_gpus`` GPUs: the projection formula above."""
        if num_gpus <= 0:
            raise SpecError("num_gpus", f"{num_gpus} must be positive", "e.g. 16384")
        rate = sum(self.job_rates_per_s(num_gpus, gpus_per_node, nics_per_node).values())
        return math.inf if rate <= 0 else 1.0 / rate


# ---- Llama 3 405B, Table 5 with SDC as its own class --------------------------------------------------
_T5_RATE = {  # (class, Table 5 rows summed, unit count of the 54-day snapshot)
    "gpu": (148 + 19 + 17 + 6, LLAMA3_GPUS),    # faulty GPU, GPU SRAM, GPU system processor, thermal interface
    "sdc": (6, LLAMA3_GPUS),                    # silent data corruption
    "hbm": (72, LLAMA3_GPUS),
    "software": (54 + 2, LLAMA3_GPUS),          # software bug, dependency
    "nccl_timeout": (7, LLAMA3_GPUS),
    "network": (35, LLAMA3_NICS),               # "Network Switch/Cable": Table 5 does not split switch from cable
    "nic": (7, LLAMA3_NICS),
    "host": (3 + 3 + 2 + 2 + 2 + 2, LLAMA3_NODES),
    "host_maintenance": (32, LLAMA3_NODES),
}
LLAMA3_16K = FailureModel(
    name="llama3-16k",
    source="Llama 3 Herd of Models (arXiv 2407.21783) sec. 3.3.4, Table 5: 419 unexpected interruptions (silent data "
           "corruption 6 of them) and 47 planned in 54 days on 16,384 H100s",
    rates_per_unit_hour={k: n / (units * LLAMA3_HOURS) for k, (n, units) in _T5_RATE.items()},
    planned_per_node_hour=LLAMA3_PLANNED / (LLAMA3_NODES * LLAMA3_HOURS),
)
PRESETS.setdefault("llama3-16k", LLAMA3_16K)

# Fail-slow: MegaScale (arXiv 2402.15627 sec. 6.3) found hosts ~10% slower; the rate of such events per
# node-hour is not published for these fleets. ASSUMPTION: one fail-slow event per ten fail-stop ones on the
# same nodes (Llama 3's node rate / 10), found within 10 minutes (MegaScale's detection-and-diagnosis window).
_LLAMA3_NODE_RATE = 419 / (LLAMA3_NODES * LLAMA3_HOURS)
_FAIL_SLOW_ASSUMED = FailSlow(rate_per_node_hour=_LLAMA3_NODE_RATE / 10, slowdown=0.10, detect_s=600.0,
                              source="slowdown: MegaScale sec. 6.3 (~10%); rate and detection: assumed (not published)")

# ---- the 504-GPU B200 operations report ---------------------------------------------------------------
# Lablup Inc. et al. 2026, "From Detection to Recovery: Operational Analysis on LLM Pre-training with 504 GPUs"
# (arXiv 2605.09370, abstract and sec. on failure precursor detection): 10 XID-identified GPU failures in 55 days of
# Prometheus data on a 63-node NVIDIA B200 cluster (504 GPUs). XID errors cover the GPU and its HBM (ECC), so the
# report's rate is the `gpu` class with `hbm` folded in; the report does not count software, network or host
# interruptions, so those classes (and SDC, which raises no XID, and planned maintenance) keep Llama 3's Table 5 rates.
B200_GPUS, B200_DAYS, B200_XID_FAILURES = 504, 55, 10
_B200_RATES = dict(LLAMA3_16K.rates_per_unit_hour)
_B200_RATES.update(gpu=B200_XID_FAILURES / (B200_GPUS * B200_DAYS * 24.0), hbm=0.0)
B200_504 = LLAMA3_16K.model_copy(update={
    "name": "lablup-b200-504",
    "source": "Lablup et al. 2026 (arXiv 2605.09370): 10 XID GPU failures in 55 days on 504 B200 (gpu class, HBM "
              "included); other classes and planned maintenance from Llama 3 Table 5 (not in the report)",
    "rates_per_unit_hour": _B200_RATES})

FLEETS: dict[str, Fleet] = {
    "llama3-16k": Fleet("llama3-16k", LLAMA3_16K.source, LLAMA3_16K, _FAIL_SLOW_ASSUMED),
    # Kokolis et al., HPCA'25 (arXiv 2410.21680): RSC-1 (16K A100) r_f = 6.50, RSC-2 (8K A100) 2.34 failures per
    # 1000 node-days; they publish totals per node, so the class mix is Llama 3's (failures.py kokolis-rsc1/2).
    "meta-rsc": Fleet("meta-rsc", PRESETS["kokolis-rsc1"].source, PRESETS["kokolis-rsc1"], _FAIL_SLOW_ASSUMED),
    "meta-rsc2": Fleet("meta-rsc2", PRESETS["kokolis-rsc2"].source, PRESETS["kokolis-rsc2"], _FAIL_SLOW_ASSUMED),
    "opt-175b": Fleet("opt-175b", PRESETS["opt-175b"].source, PRESETS["opt-175b"], _FAIL_SLOW_ASSUMED),
    "lablup-b200-504": Fleet("lablup-b200-504", B200_504.source, B200_504, _FAIL_SLOW_ASSUMED),
}
_FLEET_ALIASES = {"llama3": "llama3-16k", "meta-llama3": "llama3-16k", "rsc": "meta-rsc", "rsc-1": "meta-rsc",
                  "rsc1": "meta-rsc", "meta-rsc1": "meta-rsc", "kokolis-rsc1": "meta-rsc", "rsc-2": "meta-rsc2",
                  "rsc2": "meta-rsc2", "kokolis-rsc2": "meta-rsc2", "b200-504": "lablup-b200-504",
                  "lablup-b200": "lablup-b200-504"}
INIT_SCALINGS = ("fixed", "megascale", "stock-megatron")


def load_fleet(spec: "str | Path | Fleet") -> Fleet:
    """A fleet preset (llama3-16k, meta-rsc, meta-rsc2, opt-175b, lablup-b200-504) or a YAML/JSON file::

        name: my-fleet
        source: "where the numbers come from"
        failure_model: llama3-16k          # a preset name, or a mapping in failures.py's file format
        fail_slow: {rate_per_node_hour: 1e-5, slowdown: 0.1, detect_s: 600}
        init_scaling: fixed                # fixed | megascale | stock-megatron
    """
    if isinstance(spec, Fleet):
        return spec
    text = str(spec).strip()
    key = _FLEET_ALIASES.get(text.lower().replace("_", "-"), text.lower().replace("_", "-"))
    if key in FLEETS:
        return FLEETS[key]
    path = Path(text)
    if path.suffix.lower() in (".yaml", ".yml", ".json") or path.exists():
        return _fleet_file(path)
    raise SpecError("fleet", f"unknown fleet {text!r}", f"use one of {', '.join(FLEETS)} or a YAML file")


def _number(field_name: str, v: Any, lo: float = 0.0) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < lo:
        raise DataError(field_name, f"{v!r} must be a number >= {lo:g}", "see docs/goodput.md (fleets)")
    return float(v)


def _fleet_file(path: Path) -> Fleet:
    from ..catalog import read_data_file
    data = read_data_file(path, "fleet")
    if not isinstance(data, dict):
        raise DataError("fleet", f"{path} must hold a mapping", "see docs/goodput.md (fleets)")
    allowed = {"name", "source", "failure_model", "fail_slow", "init_scaling"}
    extra = sorted(set(data) - allowed)
    if extra:
        raise DataError(f"fleet.{extra[0]}", f"unknown key in {path.name}", f"use {', '.join(sorted(allowed))}")
    fm_spec = data.get("failure_model", "llama3-16k")
    if isinstance(fm_spec, dict):
        fm = failure_model_from_mapping(fm_spec, path.stem, path.name, f"{path.name} (failure_model)")
    else:
        fm = load_failure_model(str(fm_spec))
    fs_raw = data.get("fail_slow") or {}
    if not isinstance(fs_raw, dict):
        raise DataError("fleet.fail_slow", "must be a mapping", "e.g. {rate_per_node_hour: 1e-5, slowdown: 0.1}")
    bad = sorted(set(fs_raw) - {"rate_per_node_hour", "slowdown", "detect_s", "source"})
    if bad:
        raise DataError(f"fleet.fail_slow.{bad[0]}", "unknown key", "use rate_per_node_hour, slowdown, detect_s, source")
    base = _FAIL_SLOW_ASSUMED
    fs = FailSlow(
        rate_per_node_hour=_number("fleet.fail_slow.rate_per_node_hour",
                                   fs_raw.get("rate_per_node_hour", base.rate_per_node_hour)),
        slowdown=_number("fleet.fail_slow.slowdown", fs_raw.get("slowdown", base.slowdown)),
        detect_s=_number("fleet.fail_slow.detect_s", fs_raw.get("detect_s", base.detect_s)),
        source=str(fs_raw.get("source", base.source)))
    init = str(data.get("init_scaling", "fixed")).strip().lower()
    if init not in INIT_SCALINGS:
        raise DataError("fleet.init_scaling", f"unknown {init!r}", f"use one of {', '.join(INIT_SCALINGS)}")
    name = str(data.get("name") or path.stem)
    return Fleet(name, str(data.get("source") or path.name), fm.model_copy(update={"name": name}), fs, init)
