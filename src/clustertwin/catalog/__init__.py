"""The catalog: YAML presets of models, GPUs, nodes and clusters, every number with its source.

Names are forgiving: case, '_', ' ' and '.' versus '-' do not matter, and each preset may list
aliases. Anywhere a name is accepted, a path to a file works too (our YAML/JSON, or a Hugging Face
config.json for models).

>>> load_gpu("h100").name
'h100-sxm'
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..errors import ClusterTwinError, DataError, SpecError
from ..specs import ClusterSpec, GPUSpec, ModelSpec, NodeSpec
from ..specs.hardware import DTYPES, QUANTITY_KINDS, quantity
from ..specs.plan import all_errors

CATALOG_DIR = Path(__file__).parent
KINDS = ("models", "gpus", "nodes", "clusters")
_META_KEYS = ("aliases", "published", "notes", "default_node", "default_cluster")


def normalize(name: str) -> str:
    s = name.strip().lower()
    s = re.sub(r"[\s_/]+", "-", s)
    return s


def _squash(name: str) -> str:
    """A looser key: no separators at all (h100sxm == h100-sxm == H100_SXM)."""
    return re.sub(r"[^a-z0-9]", "", normalize(name).replace(".", "p"))


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # libyaml's parser where PyYAML has it: ~10x faster


def load_yaml(text: str) -> Any:
    """YAML text parsed as ``yaml.safe_load`` parses it (the C parser when PyYAML was built with libyaml)."""
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader


def read_data_file(path: Path, field: str) -> Any:
    """Read YAML or JSON, with one-line errors for missing or malformed files."""
    if not path.exists():
        raise DataError(field, f"file {str(path)!r} not found", "check the path or give a catalog name")
    if path.is_dir():
        raise DataError(field, f"{str(path)!r} is a directory", "give a YAML or JSON file")
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        if path.suffix.lower() == ".json":
            return json.loads(text)
        return load_yaml(text)
    except json.JSONDecodeError as e:
        raise DataError(field, f"malformed JSON in {path.name} at line {e.lineno}: {e.msg}", "fix the file") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or "syntax error"
        raise DataError(field, f"malformed YAML in {path.name}{where}: {problem}", "fix the file") from None


@lru_cache(maxsize=None)
def _index(kind: str) -> dict[str, Path]:
    index: dict[str, Path] = {}
    for path in sorted((CATALOG_DIR / kind).glob("*.yaml")):
        data = load_yaml(path.read_text(encoding="utf-8")) or {}
        names = [path.stem, data.get("name", path.stem), *data.get("aliases", [])]
        for n in names:
            index.setdefault(normalize(str(n)), path)
            index.setdefault(_squash(str(n)), path)
    return index


@lru_cache(maxsize=None)
def _preset_data(path: Path) -> dict:
    """A catalog file's fields, parsed once per process (the catalog ships with the package)."""
    data = load_yaml(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def _cached_preset(kind: str, name_or_path: Any, field: str, build):
    """A catalog preset's spec, built once per process: specs are frozen, so one instance can be
    shared. Files (paths) are read again on every call: they may change between calls."""
    text = str(name_or_path)
    if _looks_like_path(text) or Path(text).is_file():
        return build()
    key = (kind, resolve_preset(kind, text, field))
    hit = _BUILT.get(key)
    if hit is None:
        hit = _BUILT[key] = build()
    return hit


_BUILT: dict[tuple[str, Path], Any] = {}


def preset_names(kind: str) -> list[str]:
    return sorted(p.stem for p in (CATALOG_DIR / kind).glob("*.yaml"))


def _looks_like_path(text: str) -> bool:
    return any(c in text for c in "/\\") or text.lower().endswith((".yaml", ".yml", ".json"))


def resolve_preset(kind: str, name: str, field: str) -> Path:
    direct = CATALOG_DIR / kind / f"{normalize(name)}.yaml"
    if direct.is_file() and "/" not in name and "\\" not in name:   # a file's own name: no index needed
        return direct
    index = _index(kind)
    for key in (normalize(name), _squash(name)):
        if key in index:
            return index[key]
    import difflib   # a misspelt name only
    close = difflib.get_close_matches(normalize(name), preset_names(kind), n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else f"see `clustertwin list {kind}`"
    raise SpecError(field, f"unknown {kind[:-1]} {name!r}", hint + " (or give a YAML/JSON file)")


def _raw(kind: str, name_or_path: str | Path, field: str) -> tuple[dict, str]:
    text = str(name_or_path)
    path = Path(text)
    if _looks_like_path(text) or path.is_file():
        data = read_data_file(path, field)
        origin = str(path)
    else:
        data = dict(_preset_data(resolve_preset(kind, text, field)))
        origin = "catalog"
    if not isinstance(data, dict):
        raise DataError(field, f"{text!r} does not hold a mapping of fields", "write key: value pairs")
    return data, origin


Problem = tuple[str, str, str]   # (field, problem, fix)


def _nested_loader(cls: type, key: str):
    """The loader of a field that may name a preset or a file (a node's GPU, a cluster's node)."""
    if cls is NodeSpec and key == "gpu":
        return load_gpu, GPUSpec
    if cls is ClusterSpec and key == "node":
        return load_node, NodeSpec
    return None, None


def _precheck(cls: type, data: dict, prefix: str, problems: list[Problem]) -> dict:
    """``data`` with its quantities parsed and checked (a bandwidth or size needs a unit, every
    quantity a plausible value) and its nested presets loaded. What is wrong is added to
    ``problems`` (field paths from ``prefix``) and left out, so that every mistake is found in one go."""
    fields = cls.model_fields
    out: dict[str, Any] = {}
    for key, v in data.items():
        path = f"{prefix}.{key}"
        if key not in fields:
            import difflib   # an unknown field only
            close = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.6)
            problems.append((path, "unknown field", f"did you mean {close[0]}?" if close else "remove it"))
            continue
        loader, nested = _nested_loader(cls, key)
        try:
            if key == "peak_flops" and cls is GPUSpec and isinstance(v, dict):
                peaks, ok = {}, True
                for dtype, x in v.items():
                    if str(dtype).lower() not in DTYPES:
                        problems.append((f"{path}.{dtype}", "unknown dtype", f"use one of {', '.join(DTYPES)}"))
                        ok = False
                        continue
                    try:
                        peaks[dtype] = quantity("peak_flops", x, path=f"{path}.{str(dtype).lower()}")
                    except ClusterTwinError as e:
                        problems.append((e.field, e.problem, e.fix))
                        ok = False
                if ok:
                    out[key] = peaks
            elif key in QUANTITY_KINDS and key != "peak_flops":
                out[key] = None if v is None else quantity(key, v, path=path, require_unit=True)
            elif loader is not None and isinstance(v, str):
                out[key] = loader(v)
            elif nested is not None and isinstance(v, dict):
                out[key] = _precheck(nested, v, path, problems)
            else:
                out[key] = v
        except ClusterTwinError as e:
            field = e.field if e.field.startswith(path) else path
            problems.append((field, e.problem, e.fix))
    return out


def _covered(path: str, reported: set[str]) -> bool:
    return any(r == path or r.startswith(path + ".") or path.startswith(r + ".") for r in reported)


def _build(cls, data: dict, field: str):
    """``cls`` from a file's or a preset's fields; every missing or invalid field is reported at
    once, in one line (a single one as ``<field>: <problem>; <fix>``)."""
    problems: list[Problem] = []
    clean = _precheck(cls, {k: v for k, v in data.items() if k not in _META_KEYS}, field, problems)
    reported = {p[0] for p in problems}
    missing: list[str] = []
    single: ClusterTwinError | None = None
    try:
        obj = cls(**clean)
    except ValidationError as e:
        for f, problem, fix, kind in all_errors(e, field):
            if _covered(f, reported):
                continue
            reported.add(f)
            if kind == "missing":
                missing.append(f)
            else:
                problems.append((f, problem, fix))
    except ClusterTwinError as e:   # a check across fields (GPUSpec: a 16-bit peak), or a nested spec's own
        if not _covered(e.field, reported):
            problems.append((e.field, e.problem, e.fix))
            single = e
    else:
        if not problems:
            return obj
    if not missing and len(problems) == 1:
        if single is not None:
            raise single
        raise SpecError(*problems[0])
    docs = ("see docs/clusters.md for every field, its unit and an example" if cls is not ModelSpec
            else "add or fix each (field names as in the catalog's models)")
    rel = [(f[len(field) + 1:] if f.startswith(field + ".") else f) for f in missing]
    parts = [f"missing {', '.join(rel)}"] if missing else []
    for f, problem, fix in problems:
        name = f[len(field) + 1:] if f.startswith(field + ".") else f
        parts.append(f"{name}: {problem}" + (f" ({fix})" if fix else ""))
    if len(parts) == 1 and missing:
        raise SpecError(field, parts[0], "add " + ("it" if len(missing) == 1 else "them") + "; " + docs)
    raise SpecError(field, "; ".join(parts), docs)


def load_model(name_or_path: str | Path | ModelSpec) -> ModelSpec:
    """A model preset by name, or a file: our YAML/JSON, or a Hugging Face config.json."""
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
    return _cached_preset("models", name_or_path, "model", lambda: _load_model(name_or_path))


def _load_model(name_or_path: str | Path) -> ModelSpec:
    data, origin = _raw("models", name_or_path, "model")
    if origin != "catalog" and ("model_type" in data or "architectures" in data):
        from ..specs.hf import model_from_hf_config
        path = Path(str(name_or_path))
        name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
        return model_from_hf_config(data, name=name or "hf-model")
    return _build(ModelSpec, data, "model")


def load_gpu(name_or_path: str | Path | GPUSpec) -> GPUSpec:
    if isinstance(name_or_path, GPUSpec):
        return name_or_path
    return _cached_preset("gpus", name_or_path, "gpu",
                          lambda: _build(GPUSpec, _raw("gpus", name_or_path, "gpu")[0], "gpu"))


def default_node_name(gpu_name: str) -> str:
    data, _ = _raw("gpus", gpu_name, "gpu")
    return data.get("default_node", "")


def load_node(name_or_path: str | Path | NodeSpec) -> NodeSpec:
    if isinstance(name_or_path, NodeSpec):
        return name_or_path
    return _cached_preset("nodes", name_or_path, "node",
                          lambda: _build(NodeSpec, _raw("nodes", name_or_path, "node")[0], "node"))


def load_cluster(name_or_path: str | Path | ClusterSpec) -> ClusterSpec:
    if isinstance(name_or_path, ClusterSpec):
        return name_or_path
    return _cached_preset("clusters", name_or_path, "cluster",
                          lambda: _build(ClusterSpec, _raw("clusters", name_or_path, "cluster")[0], "cluster"))


def cluster_for_gpu(gpu: str | GPUSpec, num_gpus: int, gpus_per_node: int | None = None) -> ClusterSpec:
    """A cluster of ``num_gpus`` of ``gpu`` in that GPU's standard node (DGX/HGX or equivalent)."""
    spec = load_gpu(gpu)
    node_name = default_node_name(spec.name) if not isinstance(gpu, GPUSpec) or spec.name in _index("gpus") else ""
    if node_name:
        node = load_node(node_name)
        node = node.model_copy(update={"gpu": spec})
    else:
        node = NodeSpec(name=f"{spec.name}-node", gpu=spec, gpus_per_node=8, nics_per_node=8,
                        nic_bandwidth_bytes_per_s=50e9)
    if gpus_per_node is not None and gpus_per_node <= 0:
        raise SpecError("gpus_per_node", f"{gpus_per_node} must be positive", "give the GPUs in one server, e.g. 8")
    if gpus_per_node and gpus_per_node != node.gpus_per_node:
        nics = max(1, round(node.nics_per_node * gpus_per_node / node.gpus_per_node))
        node = node.model_copy(update={"gpus_per_node": gpus_per_node, "nics_per_node": nics})
    base = ClusterSpec(name=f"{num_gpus}x{spec.name}", node=node, num_nodes=1)
    return base.with_gpus(num_gpus)


def list_presets(kind: str) -> list[dict]:
    """Rows for `clustertwin list`."""
    rows = []
    for name in preset_names(kind):
        path = CATALOG_DIR / kind / f"{name}.yaml"
        data = load_yaml(path.read_text(encoding="utf-8")) or {}
        row: dict[str, Any] = {"name": data.get("name", name), "source": data.get("source", "")}
        if kind == "models":
            m = load_model(name)
            row.update(params=m.params_total, active_params=m.params_active, layers=m.num_layers,
                       hidden=m.hidden_size, heads=m.num_heads, kv_heads=m.kv_heads, vocab=m.vocab_size,
                       seq_len=m.max_seq_len, moe_experts=m.moe_num_experts, family=m.family)
        elif kind == "gpus":
            g = load_gpu(name)
            row.update(bf16_flops=g.peak("bf16"), fp8_flops=g.peak_flops.get("fp8"), hbm_bytes=g.hbm_bytes,
                       hbm_bandwidth_bytes_per_s=g.hbm_bandwidth_bytes_per_s,
                       scaleup_bandwidth_bytes_per_s=g.scaleup_bandwidth_bytes_per_s, tdp_w=g.tdp_w,
                       default_node=data.get("default_node", ""))
        elif kind == "nodes":
            n = load_node(name)
            row.update(gpu=n.gpu.name, gpus_per_node=n.gpus_per_node, scaleup_fabric=n.scaleup_fabric,
                       nics_per_node=n.nics_per_node, nic_bandwidth_bytes_per_s=n.nic_bandwidth_bytes_per_s)
        else:
            c = load_cluster(name)
            row.update(gpu=c.gpu.name, node=c.node.name, num_nodes=c.num_nodes, num_gpus=c.num_gpus,
                       topology=c.topology, oversubscription=c.oversubscription)
        if data.get("aliases"):
            row["aliases"] = data["aliases"]
        rows.append(row)
    return rows
