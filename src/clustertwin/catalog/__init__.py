"""The catalog: YAML presets of models, GPUs, nodes and clusters, every number with its source.

Names are forgiving: case, '_', ' ' and '.' versus '-' do not matter, and each preset may list
aliases. Anywhere a name is accepted, a path to a file works too (our YAML/JSON, or a Hugging Face
config.json for models).

>>> load_gpu("h100").name
'h100-sxm'
"""
from __future__ import annotations

import difflib
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..errors import DataError, SpecError
from ..specs import ClusterSpec, GPUSpec, ModelSpec, NodeSpec
from ..specs.plan import first_error

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
        return yaml.safe_load(text)
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
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        names = [path.stem, data.get("name", path.stem), *data.get("aliases", [])]
        for n in names:
            index.setdefault(normalize(str(n)), path)
            index.setdefault(_squash(str(n)), path)
    return index


def preset_names(kind: str) -> list[str]:
    return sorted(p.stem for p in (CATALOG_DIR / kind).glob("*.yaml"))


def _looks_like_path(text: str) -> bool:
    return any(c in text for c in "/\\") or text.lower().endswith((".yaml", ".yml", ".json"))


def resolve_preset(kind: str, name: str, field: str) -> Path:
    index = _index(kind)
    for key in (normalize(name), _squash(name)):
        if key in index:
            return index[key]
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
        data = yaml.safe_load(resolve_preset(kind, text, field).read_text(encoding="utf-8"))
        origin = "catalog"
    if not isinstance(data, dict):
        raise DataError(field, f"{text!r} does not hold a mapping of fields", "write key: value pairs")
    return data, origin


def _build(cls, data: dict, field: str):
    clean = {k: v for k, v in data.items() if k not in _META_KEYS}
    try:
        return cls(**clean)
    except ValidationError as e:
        f, problem, fix = first_error(e, field)
        raise SpecError(f, problem, fix) from None


def load_model(name_or_path: str | Path | ModelSpec) -> ModelSpec:
    """A model preset by name, or a file: our YAML/JSON, or a Hugging Face config.json."""
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
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
    data, _ = _raw("gpus", name_or_path, "gpu")
    return _build(GPUSpec, data, "gpu")


def default_node_name(gpu_name: str) -> str:
    data, _ = _raw("gpus", gpu_name, "gpu")
    return data.get("default_node", "")


def load_node(name_or_path: str | Path | NodeSpec) -> NodeSpec:
    if isinstance(name_or_path, NodeSpec):
        return name_or_path
    data, _ = _raw("nodes", name_or_path, "node")
    data = dict(data)
    if isinstance(data.get("gpu"), str):
        data["gpu"] = load_gpu(data["gpu"])
    return _build(NodeSpec, data, "node")


def load_cluster(name_or_path: str | Path | ClusterSpec) -> ClusterSpec:
    if isinstance(name_or_path, ClusterSpec):
        return name_or_path
    data, _ = _raw("clusters", name_or_path, "cluster")
    data = dict(data)
    if isinstance(data.get("node"), str):
        data["node"] = load_node(data["node"])
    elif isinstance(data.get("node"), dict) and isinstance(data["node"].get("gpu"), str):
        data["node"] = {**data["node"], "gpu": load_gpu(data["node"]["gpu"])}
    return _build(ClusterSpec, data, "cluster")


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
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
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
