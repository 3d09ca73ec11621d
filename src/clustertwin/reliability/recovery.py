"""Recovery time after a fail-stop interruption, part by part, each with its scaling law and source.

| part | law | default | source |
|---|---|---|---|
| detection | constant (a health-check / watchdog period) | 5 min | MegaScale (arXiv 2402.15627) sec. 6.3: detection + diagnosis under 10 min; Kokolis et al. (arXiv 2410.21680) health checks every 5 min |
| stop | constant | 0 (inside detection) | assumption |
| reschedule / replace | constant (a scheduler decision + a node from the pool) | 5 min; 1 min with a free hot spare | MegaScale's other 5 min; spare swap assumed |
| init (processes + communicators) | ``fixed``: constant; ``megascale``: 5 s x N / 2,048; ``stock-megatron``: 1,047 s x N / 2,048 | 30 s (fixed) | MegaScale sec. 3.5: stock Megatron-LM 1,047 s on 2,048 GPUs, < 5 s after their work, < 30 s on > 10,000 GPUs |
| checkpoint load | max(bytes / storage bandwidth, node's bytes / node path); from a peer: node's bytes / backend NICs | from the plan | checkpoint.py (Llama 3 sec. 3.3.1 storage, GEMINI SOSP'23 peer memory) |
| warm-up | steps x step time | 2 steps | assumption |

The linear laws are the two MegaScale points taken at face value (a barrier and communicator set-up
serialised over ranks grows with N: 1,047 s / 2,048 GPUs = 0.51 s per GPU; after parallelising it,
5 s at 2,048 and 30 s at ~12,288 GPUs are both ~2.4 ms per GPU).

>>> round(init_time_s("stock-megatron", 30.0, 2048))
1047
>>> round(init_time_s("megascale", 30.0, 12288))
30
>>> init_time_s("fixed", 30.0, 100000)
30.0
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MEGASCALE_GPUS = 2048
MEGASCALE_STOCK_INIT_S = 1047.0     # MegaScale sec. 3.5: stock Megatron-LM initialisation on 2,048 GPUs
MEGASCALE_OPT_INIT_S = 5.0          # MegaScale sec. 3.5: "under 5 seconds" on 2,048 GPUs after optimisation

SOURCES = {
    "detection_s": "MegaScale sec. 6.3 (under 10 min with diagnosis); Kokolis et al. 2025 (health checks every 5 min)",
    "stop_s": "assumed inside the detection window",
    "reschedule_s": "MegaScale sec. 6.3 (the rest of the 10 min); a free hot spare: assumed 1 min",
    "init_s": "MegaScale sec. 3.5: 1,047 s stock on 2,048 GPUs; < 5 s optimised; < 30 s on > 10,000 GPUs",
    "load_s": "checkpoint size from the plan over storage (Llama 3 sec. 3.3.1) or peer memory (GEMINI, SOSP'23)",
    "warmup_s": "assumed: 2 steps",
}


def init_time_s(scaling: str, init_s: float, num_gpus: int) -> float:
    """Process and communicator initialisation of ``num_gpus`` ranks under a scaling law."""
    if scaling == "stock-megatron":
        return MEGASCALE_STOCK_INIT_S * num_gpus / MEGASCALE_GPUS
    if scaling == "megascale":
        return MEGASCALE_OPT_INIT_S * num_gpus / MEGASCALE_GPUS
    return float(init_s)


@dataclass(frozen=True)
class RecoveryParts:
    """One fail-stop recovery, part by part (seconds); ``replace_s`` is paid only when a node must be
    replaced (``spare_swap_s`` instead when a hot spare is free)."""

    detection_s: float
    stop_s: float
    reschedule_s: float
    spare_swap_s: float
    init_s: float
    load_s: float
    load_from: str
    warmup_s: float
    init_scaling: str

    @property
    def in_place_s(self) -> float:
        return self.detection_s + self.stop_s + self.init_s + self.load_s + self.warmup_s

    def to_json(self) -> dict[str, Any]:
        return {"detection_s": self.detection_s, "stop_s": self.stop_s, "reschedule_s": self.reschedule_s,
                "spare_swap_s": self.spare_swap_s, "init_s": self.init_s, "load_s": self.load_s,
                "load_from": self.load_from, "warmup_s": self.warmup_s, "init_scaling": self.init_scaling,
                "sources": dict(SOURCES)}
