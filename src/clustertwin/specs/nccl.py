"""A job's NCCL environment: NCCL_ALGO, NCCL_PROTO and NCCL_NVLS_ENABLE as NCCL reads them.

NCCL parses NCCL_ALGO and NCCL_PROTO with one routine (NVIDIA/nccl src/graph/tuning.cc ``parseList``,
applied in ``ncclTopoTuneModel``): a comma-separated list of names compared case-insensitively
(``strcasecmp``), the names of ``ncclAlgoStr`` (Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree,
PAT; NCCL before 2.12 had one CollNet) and ``ncclProtoStr`` (LL, LL128, Simple); a leading ``^`` enables
every name but those listed. NCCL 2.24 adds per-collective lists (``allreduce:tree;broadcast:ring``),
which are not modelled here and are refused with a fix. NCCL_NVLS_ENABLE=0 turns NVLS (and so NVLS tree)
off (NCCL docs, env.html).

The names are mapped onto the collective model's own (``cost.network.ALGORITHMS`` / ``PROTOCOLS``);
the pricer applies them as NCCL does (``NetworkPricer``).
"""
from __future__ import annotations

from pydantic import field_validator, model_validator

from ..errors import SpecError
from .model import Frozen

# NCCL's names (lower case) -> the collective model's algorithms
NCCL_ALGO_NAMES: dict[str, tuple[str, ...]] = {
    "ring": ("ring",), "tree": ("tree",), "nvls": ("nvls",), "nvlstree": ("nvls_tree",), "pat": ("pat",),
    "collnetdirect": ("collnet_direct",), "collnetchain": ("collnet_chain",),
    "collnet": ("collnet_direct", "collnet_chain"),
}
MODEL_ALGORITHMS: tuple[str, ...] = ("ring", "tree", "nvls", "nvls_tree", "pat", "collnet_direct", "collnet_chain")
NCCL_PROTO_NAMES: dict[str, tuple[str, ...]] = {"ll": ("ll",), "ll128": ("ll128",), "simple": ("simple",)}
MODEL_PROTOCOLS: tuple[str, ...] = ("ll", "ll128", "simple")
_SHOWN = {"NCCL_ALGO": "Ring, Tree, NVLS, NVLSTree, PAT, CollNetDirect, CollNetChain (or CollNet)",
          "NCCL_PROTO": "LL, LL128, Simple"}
_EXAMPLE = {"NCCL_ALGO": '"Ring,Tree" or "^NVLS"', "NCCL_PROTO": '"Simple" or "^LL128"'}


def parse_nccl_list(text: object, var: str, field: str | None = None) -> tuple[str, ...]:
    """The model's algorithms (``var`` = "NCCL_ALGO") or protocols ("NCCL_PROTO") a value of that
    environment variable leaves NCCL, in the model's order. SpecError naming ``field`` (default
    ``var``) for an unknown name, an empty list, a list that leaves nothing or NCCL's per-collective
    syntax."""
    field = field or var
    names, order = (NCCL_ALGO_NAMES, MODEL_ALGORITHMS) if var == "NCCL_ALGO" else (NCCL_PROTO_NAMES, MODEL_PROTOCOLS)
    fix = f"write a comma list of {_SHOWN[var]}, optionally after ^ (all but those), e.g. {_EXAMPLE[var]}"
    if not isinstance(text, str):
        raise SpecError(field, f"{text!r} is not a list of names", fix)
    s = text.strip()
    if ";" in s or ":" in s:
        raise SpecError(field, f"{text!r}: per-collective lists (NCCL 2.24's 'allreduce:...;...') are not modelled",
                        f"give one list for every collective, e.g. {_EXAMPLE[var]}")
    exclude = s.startswith("^")
    items = [x.strip() for x in (s[1:] if exclude else s).split(",")]
    if not s or any(not x for x in items):
        raise SpecError(field, f"{text!r} has an empty name", fix)
    picked: set[str] = set()
    for item in items:
        key = item.lower().replace("_", "").replace("-", "")
        if key not in names:
            raise SpecError(field, f"unknown {'algorithm' if var == 'NCCL_ALGO' else 'protocol'} {item!r}", fix)
        picked.update(names[key])
    kept = tuple(a for a in order if (a not in picked) == exclude)
    if not kept:
        raise SpecError(field, f"{text!r} leaves NCCL no {'algorithm' if var == 'NCCL_ALGO' else 'protocol'}",
                        f"leave at least one enabled, e.g. {_EXAMPLE[var]}")
    return kept


class NcclEnv(Frozen):
    """The NCCL environment variables of a cluster's jobs that the collective model honours (a
    cluster file's ``nccl_env``). Values as the variables take them; None: NCCL's default."""

    NCCL_ALGO: str | None = None
    NCCL_PROTO: str | None = None
    NCCL_NVLS_ENABLE: int | None = None

    @field_validator("NCCL_ALGO", "NCCL_PROTO", mode="before")
    @classmethod
    def _text(cls, v, info):
        if v is None:
            return v
        if isinstance(v, (list, tuple)) and v and all(isinstance(x, str) for x in v):
            v = ",".join(v)          # a YAML list of names reads as NCCL's comma list
        if not isinstance(v, str):
            raise SpecError(f"nccl_env.{info.field_name}", f"{v!r} is not a list of names",
                            f"write it as the environment variable takes it, e.g. {_EXAMPLE[info.field_name]}")
        parse_nccl_list(v, info.field_name, f"nccl_env.{info.field_name}")
        return v.strip()

    @field_validator("NCCL_NVLS_ENABLE", mode="before")
    @classmethod
    def _flag(cls, v):
        if v is None:
            return v
        if isinstance(v, bool) or str(v).strip() not in ("0", "1"):
            raise SpecError("nccl_env.NCCL_NVLS_ENABLE", f"{v!r} is not 0 or 1", "write 0 (NVLS off) or 1")
        return int(str(v).strip())

    @model_validator(mode="after")
    def _something_left(self) -> "NcclEnv":
        algos = self.algorithms
        if algos is not None and not algos:
            raise SpecError("nccl_env.NCCL_NVLS_ENABLE", f"NCCL_NVLS_ENABLE=0 with NCCL_ALGO={self.NCCL_ALGO} leaves "
                            "NCCL no algorithm", "allow Ring or Tree in NCCL_ALGO, or drop NCCL_NVLS_ENABLE")
        return self

    @property
    def algorithms(self) -> tuple[str, ...] | None:
        """The model's algorithms NCCL may run (None: all)."""
        algos = None if self.NCCL_ALGO is None else parse_nccl_list(self.NCCL_ALGO, "NCCL_ALGO")
        if self.NCCL_NVLS_ENABLE == 0:
            algos = tuple(a for a in (algos or MODEL_ALGORITHMS) if a not in ("nvls", "nvls_tree"))
        return algos

    @property
    def protocols(self) -> tuple[str, ...] | None:
        """The model's protocols NCCL may use (None: all)."""
        return None if self.NCCL_PROTO is None else parse_nccl_list(self.NCCL_PROTO, "NCCL_PROTO")

    @property
    def is_default(self) -> bool:
        return self.NCCL_ALGO is None and self.NCCL_PROTO is None and self.NCCL_NVLS_ENABLE is None

    def to_json(self) -> dict:
        return {k: v for k, v in (("NCCL_ALGO", self.NCCL_ALGO), ("NCCL_PROTO", self.NCCL_PROTO),
                                  ("NCCL_NVLS_ENABLE", self.NCCL_NVLS_ENABLE)) if v is not None}
