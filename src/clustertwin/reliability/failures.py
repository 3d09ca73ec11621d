"""Failure model: interruption rates per component class, scaled by the components a job holds.

Every class has a rate per unit-hour and a unit (a GPU, a node, a NIC); a job of G GPUs on N nodes
with K NICs fails at the sum of rate x units. Failures are independent and memoryless (Poisson), the
model every study below fits (Kokolis et al. 2025: job MTTF = 1 / (N_nodes * r_f)).

Default rates come from the Llama 3 405B run (Llama 3 Herd of Models, arXiv 2407.21783, sec. 3.3.4,
Table 5): 419 unexpected interruptions in a 54-day snapshot on 16,384 H100 GPUs (2,048 Grand Teton
servers, one 400 Gb/s NIC per GPU), plus 47 planned ones. Each Table 5 row is mapped to a class and
divided by the exposure (units x 1,296 h). The snapshot used "up to" 16K GPUs: taking 16,384 for the
whole window gives the lowest rate per unit consistent with the table.

>>> m = load_failure_model("llama3")
>>> from clustertwin.catalog import load_cluster
>>> round(m.job_mtbf_s(load_cluster("meta-llama3-24k").with_gpus(16384)) / 3600, 2)   # 54 d x 24 / 419
3.09
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Mapping

from pydantic import Field, ValidationError, field_validator

from ..errors import DataError, SpecError
from ..specs.hardware import ClusterSpec
from ..specs.model import Frozen

Unit = Literal["gpu", "node", "nic"]


@dataclass(frozen=True)
class ComponentClass:
    name: str
    unit: Unit
    replaces_node: bool      # recovery swaps the node out (hardware) rather than restarting in place
    description: str


# The classes and where each Table 5 row of the Llama 3 paper goes.
COMPONENTS: dict[str, ComponentClass] = {c.name: c for c in (
    ComponentClass("gpu", "gpu", True, "faulty GPU, GPU SRAM, GPU system processor, silent data corruption, "
                                       "GPU thermal interface + sensor"),
    ComponentClass("hbm", "gpu", True, "GPU HBM3 memory"),
    ComponentClass("sdc", "gpu", True, "silent data corruption, once detected (the GPU is drained)"),
    ComponentClass("software", "gpu", False, "software bugs and dependencies (one per rank)"),
    ComponentClass("nccl_timeout", "gpu", False, "NCCL watchdog timeouts of unknown cause"),
    ComponentClass("network", "nic", False, "network switch or cable (one leaf port and cable per NIC)"),
    ComponentClass("nic", "nic", True, "network interface card"),
    ComponentClass("host", "node", True, "SSD, power supply, chassis, IO expansion board, CPU, system memory"),
    ComponentClass("host_maintenance", "node", True, "unplanned host maintenance"),
)}

# ---- Llama 3 405B, Table 5 (arXiv 2407.21783 sec. 3.3.4): interruptions by root cause ------------------
LLAMA3_HOURS = 54 * 24                      # "a 54-day snapshot period of pre-training"
LLAMA3_GPUS = 16_384                        # sec. 3.3.1: "up to 16K H100 GPUs"
LLAMA3_NODES = LLAMA3_GPUS // 8             # sec. 3.3.1: eight GPUs per Grand Teton server
LLAMA3_NICS = LLAMA3_GPUS                   # one backend RoCE NIC per GPU (catalog node grand-teton)
LLAMA3_TABLE5: dict[str, dict[str, int]] = {
    "gpu": {"Faulty GPU": 148, "GPU SRAM Memory": 19, "GPU System Processor": 17,
            "Silent Data Corruption": 6, "GPU Thermal Interface + Sensor": 6},
    "hbm": {"GPU HBM3 Memory": 72},
    "software": {"Software Bug": 54, "Dependency": 2},
    "nccl_timeout": {"NCCL Watchdog Timeouts": 7},
    "network": {"Network Switch/Cable": 35},
    "nic": {"NIC": 7},
    "host": {"SSD": 3, "Power Supply": 3, "Server Chassis": 2, "IO Expansion Board": 2, "CPU": 2, "System Memory": 2},
    "host_maintenance": {"Host Maintenance": 32},
}
LLAMA3_UNEXPECTED = 419                     # sec. 3.3.4: "419 were unexpected interruptions"
LLAMA3_PLANNED = 47                         # sec. 3.3.4: "47 were planned interruptions" (automated maintenance)
_UNITS_LLAMA3 = {"gpu": LLAMA3_GPUS, "node": LLAMA3_NODES, "nic": LLAMA3_NICS}


def _llama3_rates() -> dict[str, float]:
    return {name: sum(rows.values()) / (_UNITS_LLAMA3[COMPONENTS[name].unit] * LLAMA3_HOURS)
            for name, rows in LLAMA3_TABLE5.items()}


class FailureModel(Frozen):
    """Rates of unplanned interruptions per unit-hour, by component class, and of planned ones per node-hour."""

    name: str = "custom"
    source: str = ""
    rates_per_unit_hour: dict[str, float] = Field(default_factory=dict)
    units: dict[str, Unit] = Field(default_factory=dict, description="unit of each class not in COMPONENTS")
    replaces_node: dict[str, bool] = Field(default_factory=dict, description="for classes not in COMPONENTS")
    planned_per_node_hour: float = Field(0.0, ge=0.0, description="planned interruptions (maintenance)")

    @field_validator("rates_per_unit_hour")
    @classmethod
    def _positive(cls, v: dict[str, float]) -> dict[str, float]:
        for k, r in v.items():
            _check_rate(f"failure_rates.{k}", r)
        return v

    def unit_of(self, component: str) -> Unit:
        if component in self.units:
            return self.units[component]
        if component in COMPONENTS:
            return COMPONENTS[component].unit
        raise SpecError(f"failure_rates.{component}", "unknown component class",
                        f"use one of {', '.join(COMPONENTS)} or give its unit (gpu, node or nic) in a YAML model")

    def replaces(self, component: str) -> bool:
        if component in self.replaces_node:
            return self.replaces_node[component]
        return COMPONENTS[component].replaces_node if component in COMPONENTS else True

    def job_rates_per_s(self, cluster: ClusterSpec) -> dict[str, float]:
        """Unplanned failures per second of each class for a job holding the whole ``cluster``."""
        units = job_units(cluster)
        return {k: r * units[self.unit_of(k)] / 3600.0 for k, r in self.rates_per_unit_hour.items()}

    def unplanned_rate_per_s(self, cluster: ClusterSpec) -> float:
        return sum(self.job_rates_per_s(cluster).values())

    def planned_rate_per_s(self, cluster: ClusterSpec) -> float:
        return self.planned_per_node_hour * cluster.num_nodes / 3600.0

    def job_mtbf_s(self, cluster: ClusterSpec) -> float:
        """Mean time between unplanned interruptions of a job on ``cluster``."""
        rate = self.unplanned_rate_per_s(cluster)
        return math.inf if rate <= 0 else 1.0 / rate

    def with_rates(self, overrides: Mapping[str, float]) -> "FailureModel":
        """The same model with some per-unit-hour rates replaced (or classes added)."""
        rates = dict(self.rates_per_unit_hour)
        for k, r in overrides.items():
            key = str(k).strip().lower().replace("-", "_")
            self.unit_of(key)  # unknown class -> one-line error
            rates[key] = _check_rate(f"failure_rates.{key}", r)
        return self.model_copy(update={"rates_per_unit_hour": rates, "name": f"{self.name}+overrides"})

    def with_job_mtbf(self, mtbf_s: float, cluster: ClusterSpec) -> "FailureModel":
        """Unplanned rates scaled so that a job on ``cluster`` fails every ``mtbf_s`` on average (mix kept)."""
        if not (isinstance(mtbf_s, (int, float)) and math.isfinite(mtbf_s) and mtbf_s > 0):
            raise SpecError("mtbf", f"{mtbf_s!r} must be a positive duration", 'e.g. --mtbf 3h')
        current = self.unplanned_rate_per_s(cluster)
        if current <= 0:
            raise SpecError("mtbf", "the failure model has no component classes to scale",
                            "add rates (--failure-rate gpu=1e-5) or use a preset model")
        f = (1.0 / mtbf_s) / current
        rates = {k: r * f for k, r in self.rates_per_unit_hour.items()}
        return self.model_copy(update={"rates_per_unit_hour": rates, "name": f"{self.name}@mtbf"})

    def scaled(self, factor: float, name: str, source: str) -> "FailureModel":
        rates = {k: r * factor for k, r in self.rates_per_unit_hour.items()}
        return self.model_copy(update={"rates_per_unit_hour": rates, "name": name, "source": source})


def _check_rate(field: str, r: object) -> float:
    if isinstance(r, bool) or not isinstance(r, (int, float)):
        raise SpecError(field, f"expected a number of failures per unit-hour, got {r!r}", "e.g. 1.2e-5")
    r = float(r)
    if not math.isfinite(r) or r <= 0:
        raise SpecError(field, f"rate {r!r} must be positive and finite",
                        "give failures per unit-hour (e.g. 1.2e-5); leave the class out to drop it")
    return r


def job_units(cluster: ClusterSpec) -> dict[str, int]:
    """GPUs, nodes and NICs a job on ``cluster`` holds."""
    return {"gpu": cluster.num_gpus, "node": cluster.num_nodes, "nic": cluster.num_nodes * cluster.node.nics_per_node}


# ---- presets ----------------------------------------------------------------------------------------
_LLAMA3 = FailureModel(
    name="llama3",
    source="Llama 3 Herd of Models (arXiv 2407.21783) sec. 3.3.4, Table 5: 419 unexpected and 47 planned "
           "interruptions in 54 days on 16,384 H100 GPUs",
    rates_per_unit_hour=_llama3_rates(),
    planned_per_node_hour=LLAMA3_PLANNED / (LLAMA3_NODES * LLAMA3_HOURS),
)
# Unplanned interruptions per node-day of the Llama 3 mix on an 8-GPU, 8-NIC server: 419 / (2,048 x 54).
_LLAMA3_PER_NODE_DAY = LLAMA3_UNEXPECTED / (LLAMA3_NODES * 54)


def _mix_scaled(per_1000_node_days: float, name: str, source: str) -> FailureModel:
    """The Llama 3 mix of classes, scaled to a published total rate per node-day (8-GPU servers)."""
    m = _LLAMA3.scaled(per_1000_node_days / 1000.0 / _LLAMA3_PER_NODE_DAY, name, source)
    return m.model_copy(update={"planned_per_node_hour": 0.0})


PRESETS: dict[str, FailureModel] = {
    "llama3": _LLAMA3,
    # Kokolis et al., Revisiting Reliability in Large-Scale ML Research Clusters (HPCA'25, arXiv 2410.21680):
    # r_f = 6.50 failures per 1000 node-days on RSC-1 (16K A100) and 2.34 on RSC-2 (8K A100); their projected
    # MTTF is 1/(N_nodes r_f): 1.8 h at 16,384 GPUs, 0.23 h at 131,072. Class mix: Llama 3's (they publish totals).
    "kokolis-rsc1": _mix_scaled(6.50, "kokolis-rsc1", "Kokolis et al. 2025 (arXiv 2410.21680): RSC-1 r_f = 6.50 "
                                "failures / 1000 node-days; class mix of Llama 3 Table 5"),
    "kokolis-rsc2": _mix_scaled(2.34, "kokolis-rsc2", "Kokolis et al. 2025 (arXiv 2410.21680): RSC-2 r_f = 2.34 "
                                "failures / 1000 node-days; class mix of Llama 3 Table 5"),
    # OPT-175B (Zhang et al. 2022, arXiv 2205.01068, sec. 2.5 and the OPT-175B logbook): "at least 35 manual
    # restarts" and an estimated 70+ automatic ones "over the course of 2 months" on 992 A100s (124 servers):
    # 105 / (124 x 60 days) = 14.1 per 1000 node-days. Class mix: Llama 3's.
    "opt-175b": _mix_scaled(105 / (124 * 60) * 1000, "opt-175b",
                            "OPT-175B (arXiv 2205.01068 sec. 2.5): 35 manual + ~70 automatic restarts in ~2 months "
                            "on 992 A100s; class mix of Llama 3 Table 5"),
}
_ALIASES = {"llama-3": "llama3", "llama3-405b": "llama3", "meta": "llama3", "rsc1": "kokolis-rsc1",
            "rsc-1": "kokolis-rsc1", "kokolis": "kokolis-rsc1", "rsc2": "kokolis-rsc2", "rsc-2": "kokolis-rsc2",
            "opt": "opt-175b", "opt175b": "opt-175b"}
DEFAULT_FAILURE_MODEL = "llama3"


def load_failure_model(spec: "str | Path | FailureModel | None" = None) -> FailureModel:
    """A preset name (llama3, kokolis-rsc1, kokolis-rsc2, opt-175b), a YAML/JSON file, or a model.

    File format::

        name: my-fleet
        source: "where the numbers come from"
        base: llama3                 # optional: start from a preset's classes and planned rate
        scale: 1.0                   # optional: multiply every unplanned rate
        rates_per_unit_hour: {gpu: 1.2e-5, hbm: 3.0e-6}
        components: {cooling: {unit: node, rate_per_unit_hour: 2.0e-6, replaces_node: true}}
        planned_per_node_hour: 0.0
    """
    if spec is None:
        spec = DEFAULT_FAILURE_MODEL
    if isinstance(spec, FailureModel):
        return spec
    if not isinstance(spec, (str, Path)):
        raise SpecError("failure_model", f"expected a preset name or a file, got {type(spec).__name__}",
                        f"use one of {', '.join(PRESETS)} or a YAML file")
    text = str(spec).strip()
    key = text.lower().replace("_", "-")
    key = _ALIASES.get(key, key)
    if key in PRESETS:
        return PRESETS[key]
    path = Path(text)
    if path.suffix.lower() in (".yaml", ".yml", ".json") or path.exists():
        return _from_file(path)
    raise SpecError("failure_model", f"unknown failure model {text!r}",
                    f"use one of {', '.join(PRESETS)} or a YAML/JSON file")


def _from_file(path: Path) -> FailureModel:
    from ..catalog import read_data_file
    data = read_data_file(path, "failure_model")
    if not isinstance(data, dict):
        raise DataError("failure_model", f"{path} must hold a mapping", "see docs/goodput.md for the format")
    return failure_model_from_mapping(data, path.stem, str(path), path.name)


def failure_model_from_mapping(data: dict, default_name: str, default_source: str, where: str = "the file") -> FailureModel:
    """A failure model from the file format above, already read (a fleet file holds one inline)."""
    allowed = {"name", "source", "base", "scale", "rates_per_unit_hour", "components", "planned_per_node_hour"}
    extra = sorted(set(data) - allowed)
    if extra:
        raise DataError(f"failure_model.{extra[0]}", f"unknown key in {where}", f"use {', '.join(sorted(allowed))}")
    base_name = data.get("base")
    base = load_failure_model(str(base_name)) if base_name not in (None, "", "none") else FailureModel()
    rates = dict(base.rates_per_unit_hour)
    units = dict(base.units)
    replaces = dict(base.replaces_node)
    raw_rates = data.get("rates_per_unit_hour") or {}
    if not isinstance(raw_rates, dict):
        raise DataError("failure_model.rates_per_unit_hour", "must map component classes to rates", "e.g. {gpu: 1.2e-5}")
    for k, r in raw_rates.items():
        name = str(k).strip().lower().replace("-", "_")
        if name not in COMPONENTS and name not in units:
            raise DataError(f"failure_model.rates_per_unit_hour.{name}", "unknown component class",
                            f"use one of {', '.join(COMPONENTS)} or declare it under components: with its unit")
        rates[name] = _check_rate(f"failure_model.rates_per_unit_hour.{name}", r)
    comps = data.get("components") or {}
    if not isinstance(comps, dict):
        raise DataError("failure_model.components", "must map names to {unit, rate_per_unit_hour}",
                        "e.g. {cooling: {unit: node, rate_per_unit_hour: 2e-6}}")
    for k, spec_c in comps.items():
        name = str(k).strip().lower().replace("-", "_")
        if not isinstance(spec_c, dict) or "unit" not in spec_c or "rate_per_unit_hour" not in spec_c:
            raise DataError(f"failure_model.components.{name}", "needs unit and rate_per_unit_hour",
                            "e.g. {unit: node, rate_per_unit_hour: 2e-6}")
        unit = str(spec_c["unit"]).lower()
        if unit not in ("gpu", "node", "nic"):
            raise DataError(f"failure_model.components.{name}.unit", f"unknown unit {unit!r}", "use gpu, node or nic")
        units[name] = unit  # type: ignore[assignment]
        replaces[name] = bool(spec_c.get("replaces_node", True))
        rates[name] = _check_rate(f"failure_model.components.{name}.rate_per_unit_hour", spec_c["rate_per_unit_hour"])
    scale = data.get("scale", 1.0)
    scale = _check_rate("failure_model.scale", scale)
    rates = {k: r * scale for k, r in rates.items()}
    planned = data.get("planned_per_node_hour", base.planned_per_node_hour)
    if isinstance(planned, bool) or not isinstance(planned, (int, float)) or not math.isfinite(planned) or planned < 0:
        raise DataError("failure_model.planned_per_node_hour", f"{planned!r} must be a non-negative number",
                        "give planned interruptions per node-hour, or 0")
    try:
        return FailureModel(name=str(data.get("name") or default_name), source=str(data.get("source") or default_source),
                            rates_per_unit_hour=rates, units=units, replaces_node=replaces,
                            planned_per_node_hour=float(planned))
    except ValidationError as e:  # pragma: no cover - every field was checked above
        raise DataError("failure_model", str(e.errors()[0]["msg"]), "check the file") from None
