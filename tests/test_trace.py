"""clustertwin trace: Chakra execution traces (decoded with the Chakra package's own chakra_jsonizer and
checked against what ASTRA-sim needs), the Perfetto timeline and the JSON graph, each with a golden
file of a small case.

Golden files live in tests/golden/trace/. When the workload graph or its pricing changes on purpose,
regenerate them with ``CLUSTERTWIN_UPDATE_GOLDEN=1 pytest tests/test_trace.py`` and review the diff.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from clustertwin.cli import main
from clustertwin.export.astra import network_dims
from clustertwin.export.chakra import (RankLayout, Roofline, build_templates, expand, parse_ranks, read_trace,
                                      write_chakra)
from clustertwin.export.graph_json import SCHEMA, VERSION, graph_to_json
from clustertwin.export.perfetto import perfetto_trace, write_perfetto
from clustertwin.predict import make_training_job, predict_job
from clustertwin.schedule.step import Pricer
from clustertwin.sim.replay import simulate
from clustertwin.specs import ModelSpec
from clustertwin.workload.graph import build_graph

try:
    from chakra.schema.protobuf import et_def_pb2 as pb
except ImportError:  # pragma: no cover - the [test] extra installs mlc-chakra
    pb = None
needs_chakra = pytest.mark.skipif(pb is None, reason="needs mlc-chakra (the [chakra] extra)")

GOLDEN = Path(__file__).parent / "golden" / "trace"
UPDATE = os.environ.get("CLUSTERTWIN_UPDATE_GOLDEN") == "1"


def tiny_job(**kw):
    """2 layers, TP x CP x PP x DP = 2 x 2 x 2 x 2 on 16 H100s, 2 micro-batches: every stream shows."""
    m = ModelSpec(name="tiny-llama", num_layers=2, hidden_size=256, num_heads=4, num_kv_heads=2, ffn_hidden_size=512,
                  vocab_size=1024, max_seq_len=512, activation="swiglu", norm="rmsnorm", positions="rope", bias=False)
    args = dict(gpu="h100", num_gpus=16, plan="tp=2,cp=2,pp=2,dp=2,sp=1", micro_batch=1, global_batch=4, seq_len=512,
                framework="nemo")
    args.update(kw)
    return make_training_job(m, **args)


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing golden file {path}; run with CLUSTERTWIN_UPDATE_GOLDEN=1"
    expected = path.read_text(encoding="utf-8")
    assert text == expected, f"{name} differs from its golden file; if intended, regenerate (see module docstring)"


# ---- Chakra ----------------------------------------------------------------------------------------
def _jsonizer() -> list[str]:
    exe = shutil.which("chakra_jsonizer") or str(Path(sys.executable).parent / "chakra_jsonizer")
    if Path(exe).exists():
        return [exe]
    return [sys.executable, "-m", "chakra.src.jsonizer.jsonizer"]


def _decode_json_stream(text: str) -> list[dict]:
    """chakra_jsonizer writes the metadata and the nodes as consecutive JSON objects."""
    dec = json.JSONDecoder()
    out, i = [], 0
    while i < len(text):
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        obj, i = dec.raw_decode(text, i)
        out.append(obj)
    return out


@pytest.fixture(scope="module")
def tiny_chakra(tmp_path_factory):
    out = tmp_path_factory.mktemp("et")
    res = write_chakra(build_graph(tiny_job()), out, "tiny")
    return out, res


@needs_chakra
def test_chakra_writes_one_trace_per_rank_and_the_group_file(tiny_chakra):
    out, res = tiny_chakra
    assert res.ranks == 16 and res.files == 16
    assert sorted(p.name for p in out.glob("tiny.*.et")) == sorted(f"tiny.{r}.et" for r in range(16))
    groups = json.loads((out / "tiny.groups.json").read_text())
    assert all(k.isdigit() and len(k) == len(next(iter(groups))) for k in groups)   # integer ids, fixed width
    sizes = sorted({len(v) for v in groups.values()})
    assert sizes == [2, 4]            # tp=2 and cp=2 groups; dp x cp = 4
    manifest = json.loads((out / "tiny.manifest.json").read_text())
    assert manifest["ranks"] == 16 and manifest["comm_group_configuration"] == "tiny.groups.json"


@needs_chakra
def test_chakra_decodes_with_the_packages_jsonizer_golden(tiny_chakra, tmp_path):
    out, _ = tiny_chakra
    dst = tmp_path / "rank0.json"
    proc = subprocess.run([*_jsonizer(), "--input_filename", str(out / "tiny.0.et"), "--output_filename", str(dst)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    text = dst.read_text()
    objs = _decode_json_stream(text)
    assert objs[0]["version"] == "0.0.4"
    assert {o["type"] for o in objs[1:]} == {"COMP_NODE", "COMM_COLL_NODE", "COMM_SEND_NODE", "COMM_RECV_NODE"}
    check_golden("chakra_tiny.rank0.json", text)


def _attr(node, name):
    for a in node.attr:
        if a.name == name:
            return a
    return None


@needs_chakra
def test_chakra_follows_the_portable_subset(tiny_chakra):
    """What ASTRA-sim needs (shared/formats/chakra-for-astra-sim.md), checked on every rank."""
    out, _ = tiny_chakra
    groups = json.loads((out / "tiny.groups.json").read_text())
    sends, recvs = defaultdict(int), defaultdict(int)
    issued: dict[str, dict[int, list]] = defaultdict(dict)   # group id -> rank -> [(type, size), ...]
    for r in range(16):
        meta, nodes = read_trace(out / f"tiny.{r}.et")
        assert meta.version == "0.0.4"
        assert [n.id for n in nodes] == list(range(len(nodes)))
        for n in nodes:
            assert all(d < n.id for d in n.data_deps), "dependencies point backwards, none dangles"
            assert set(n.ctrl_deps) <= set(n.data_deps), "every ordering is in data_deps"
            cpu = _attr(n, "is_cpu_op")
            assert cpu is not None and cpu.WhichOneof("value") == "bool_val" and cpu.bool_val is False
            if n.type == pb.COMP_NODE:
                assert _attr(n, "num_ops").WhichOneof("value") == "int64_val"
                assert _attr(n, "tensor_size").WhichOneof("value") == "uint64_val"
                assert n.duration_micros >= 0
            elif n.type == pb.COMM_COLL_NODE:
                ctype = _attr(n, "comm_type")
                size = _attr(n, "comm_size")
                pg = _attr(n, "pg_name")
                assert ctype.WhichOneof("value") == "int64_val" and size.WhichOneof("value") == "int64_val"
                assert ctype.int64_val in (pb.ALL_REDUCE, pb.ALL_GATHER, pb.ALL_TO_ALL, pb.REDUCE_SCATTER)
                assert size.int64_val > 0
                assert pg.WhichOneof("value") == "string_val" and pg.string_val in groups
                assert r in groups[pg.string_val], "a rank only joins collectives of its own groups"
                issued[pg.string_val].setdefault(r, []).append((ctype.int64_val, size.int64_val))
            else:
                src, dst, tag, size = (_attr(n, k) for k in ("comm_src", "comm_dst", "comm_tag", "comm_size"))
                assert all(a.WhichOneof("value") == "int32_val" for a in (src, dst, tag))
                assert size.WhichOneof("value") == "int64_val" and size.int64_val > 0
                key = (src.int32_val, dst.int32_val, tag.int32_val, size.int64_val)
                if n.type == pb.COMM_SEND_NODE:
                    assert src.int32_val == r
                    sends[key] += 1
                else:
                    assert n.type == pb.COMM_RECV_NODE and dst.int32_val == r
                    recvs[key] += 1
    assert sends and sends == recvs, "every receive is matched by exactly one send"
    for gid, by_rank in issued.items():
        assert sorted(by_rank) == sorted(groups[gid]), f"every member of group {gid} takes part"
        seqs = list(by_rank.values())
        assert all(s == seqs[0] for s in seqs), f"members of group {gid} issue the same collectives in order"


@needs_chakra
def test_chakra_carries_the_priced_durations():
    """Per rank, the compute nodes add up to the priced compute of its passes (rounded to the µs only once)."""
    graph = build_graph(tiny_job())
    pricer = Pricer(graph)
    sim = simulate(graph)
    for t, rank in zip(build_templates(graph, pricer), sim.ranks):
        comp_us = sum(n.duration_us for n in t.nodes if n.type == pb.COMP_NODE)
        busy = sum(mp.program.compute_s for task in rank.tasks if task.stream == "compute"
                   for _, _, mp in task.segments)
        opt = sum(pricer.time(task.op) for task in rank.tasks if task.phase == "step" and task.stream == "compute")
        # with TP overlap, the chunk a GEMM waits for is a wait on the compute stream (".x", its priced time)
        waits = [n for n in t.nodes if n.name.endswith(".x")]
        assert waits and all(n.type == pb.COMP_NODE for n in waits)
        exposed = sum(n.duration_s for n in waits)
        assert abs(comp_us - (busy + opt + exposed) * 1e6) <= 1.0


@needs_chakra
def test_chakra_tp_overlap_is_one_collective_beside_its_gemm():
    """An overlapped TP collective is written once, whole (ASTRA-sim charges its latency once), with the
    exposed chunk as a wait of 1/tp of its priced time on the compute stream: an all-gather starts with
    the wait for its first chunk (the GEMM follows the wait); after a reduce-scatter beside its GEMM,
    the wait for its last chunk follows the GEMM and the next node waits for both."""
    graph = build_graph(tiny_job())
    pricer = Pricer(graph)
    t = build_templates(graph, pricer)[0]
    by_id = {n.id: n for n in t.nodes}
    overlapped = [n for n in t.nodes if n.name.endswith(".o")]
    assert overlapped and all(n.type == pb.COMM_COLL_NODE for n in overlapped)
    assert not any(n.name.endswith(".x") and n.type == pb.COMM_COLL_NODE for n in t.nodes)
    for n in overlapped:
        # a wait of the same op next to it: before it (enter) or after it (exit)
        pair = [m for m in t.nodes if m.name == n.name[:-2] + ".x"]
        assert len(pair) == 1
        w = pair[0]
        if n.comm_type == pb.ALL_GATHER:          # enter
            assert n.deps == w.deps
        else:                                      # exit
            assert n.id not in w.deps and any({w.id, n.id} <= set(m.deps) for m in t.nodes)
    # whole collectives: the same bytes as without TP overlap (where each is one collective)
    plain = build_templates(build_graph(tiny_job(plan="tp=2,cp=2,pp=2,dp=2,sp=1,overlap_tp_comm=0")), pricer)[0]
    plain_sizes = {n.name: n.comm_size for n in plain.nodes if n.type == pb.COMM_COLL_NODE}
    for n in overlapped:
        assert plain_sizes.get(n.name[:-2]) == n.comm_size, n.name
    assert by_id


@needs_chakra
def test_chakra_interleaved_and_fsdp_traces_are_consistent(tmp_path):
    for plan, kw in (("tp=2,pp=2,vpp=2,dp=2,sp=1", {"framework": "megatron"}),
                     ("tp=2,pp=1,dp=4,zero=3", {"framework": "torchtitan"}),
                     ("tp=2,pp=2,dp=2,zero=0,overlap_dp_comm=0,overlap_pp_comm=0,overlap_tp_comm=0",
                      {"framework": "megatron"})):
        job = make_training_job("gpt3-125m", gpu="h100", num_gpus=8, plan=plan, micro_batch=1, global_batch=8,
                                seq_len=1024, **kw)
        out = tmp_path / plan.replace(",", "_").replace("=", "")
        res = write_chakra(build_graph(job), out, "t")
        sends, recvs = defaultdict(int), defaultdict(int)
        for r in range(res.ranks):
            _, nodes = read_trace(out / f"t.{r}.et")
            for n in nodes:
                if n.type in (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE):
                    key = tuple(_attr(n, k).int32_val for k in ("comm_src", "comm_dst", "comm_tag"))
                    (sends if n.type == pb.COMM_SEND_NODE else recvs)[key] += 1
        assert sends == recvs, plan


@needs_chakra
def test_chakra_gradient_buckets_follow_their_pass():
    """ASTRA-sim runs one collective per rank at a time: gradient buckets are issued when the last
    backward pass that releases them ends, after that pass's TP collectives, not in between."""
    graph = build_graph(tiny_job())
    m = graph.num_microbatches
    for t in build_templates(graph):
        grads = [n for n in t.nodes if "grad" in n.name and n.type == pb.COMM_COLL_NODE and n.hole == "pg:dp_cp"]
        last_pass = [n for n in t.nodes if n.name.startswith(f"B{m - 1}.") and n.type == pb.COMM_COLL_NODE]
        assert grads and last_pass
        assert min(g.id for g in grads) > max(n.id for n in last_pass)
        assert all(any(d in {n.id for n in t.nodes if n.name.startswith(f"B{m - 1}.")} for d in g.deps)
                   or g.ctrl for g in grads)


def test_chakra_group_ids_follow_megatron_rank_order():
    layout = RankLayout(tp=2, cp=2, dp=2, pp=2, ep=1)
    assert layout.coords(13) == (1, 0, 1, 1)
    assert [layout.group_index("tp", r) for r in (0, 1, 2, 3)] == [0, 0, 1, 1]
    assert layout.group_index("cp", 0) == layout.group_index("cp", 2) != layout.group_index("cp", 1)
    assert layout.group_index("dp_cp", 0) == layout.group_index("dp_cp", 6) != layout.group_index("dp_cp", 8)


@needs_chakra
def test_chakra_bad_output_is_a_one_line_error(tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x")
    code = main(["trace", "--format", "chakra", "--out", str(f)])
    _, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: out") and "is a file" in err
    code = main(["trace", "--format", "perfetto", "--out", str(tmp_path)])
    _, err = capsys.readouterr()
    assert code == 2 and "is a directory" in err


def test_chakra_without_the_package_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "chakra.schema.protobuf", None)    # as if mlc-chakra were missing
    monkeypatch.setitem(sys.modules, "chakra.schema.protobuf.et_def_pb2", None)
    code = main(["trace", "--format", "chakra", "--out", str(tmp_path / "et")])
    _, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1 and "[chakra]" in err


@needs_chakra
def test_chakra_compute_nodes_run_in_roofline_mode(tiny_chakra):
    """Every compute node has num_ops > 0 and tensor_size > 0 (0 FLOPs hangs ASTRA-sim's roofline), and
    the roofline of the emitted system file turns them into the node's duration (within its µs rounding)."""
    out, _ = tiny_chakra
    system = json.loads((out / "tiny.system_roofline.json").read_text())
    assert system["roofline-enabled"] == 1
    roof = Roofline(peak=system["peak-perf"] * 1e12, bandwidth=system["local-mem-bw"] * 1e9)
    names = set()
    for r in (0, 8):                                       # one rank of each stage
        _, nodes = read_trace(out / f"tiny.{r}.et")
        total_us, total_roof = 0, 0.0
        for n in nodes:
            if n.type != pb.COMP_NODE:
                continue
            ops, size = _attr(n, "num_ops").int64_val, _attr(n, "tensor_size").uint64_val
            assert ops > 0 and size > 0, n.name
            t = roof.seconds(ops, size) * 1e6
            assert abs(t - n.duration_micros) <= 1.0 + 1e-6, n.name
            total_us += n.duration_micros
            total_roof += t
            names.add(n.name)
        assert abs(total_roof - total_us) <= 1.0          # the rounding is carried: totals agree
    assert any("embedding" in x for x in names)           # the nodes that had 0 FLOPs are among them


def test_roofline_attributes_hand_checked():
    roof = Roofline(peak=1e15, bandwidth=1e12)             # 1 PFLOP/s, 1 TB/s
    # a GEMM: 1e12 FLOPs, 1e9 bytes, priced at 2 ms (50% of peak): compute-bound, num_ops = 2 ms x peak
    assert roof.attributes(1e12, 1e9, 2e-3) == (2_000_000_000_000, 1_000_000_000)
    # an elementwise op with no FLOPs, 1e9 bytes in 1.25 ms (80% of HBM): tensor_size = 1.25 ms x bandwidth,
    # num_ops one per 16-bit element
    assert roof.attributes(0, 1e9, 1.25e-3) == (500_000_000, 1_250_000_000)
    for f, b, t in ((1e12, 1e9, 2e-3), (0, 1e9, 1.25e-3), (5e9, 4e9, 1e-6), (0, 0, 3e-6)):
        ops, size = roof.attributes(f, b, t)
        assert ops > 0 and size > 0 and roof.seconds(ops, size) == pytest.approx(t, rel=1e-6)


@needs_chakra
def test_chakra_writes_astra_sim_configs(tiny_chakra):
    """The network, system and remote-memory files carry the fields ASTRA-sim's parsers read, matching
    clustertwin's cluster (16 H100s: 8 GPUs a node, 2 nodes) and a README with the command."""
    out, _ = tiny_chakra
    net = yaml.safe_load((out / "tiny.network.yml").read_text())
    assert net["topology"] == ["Switch", "Switch"] and net["npus_count"] == [8, 2]
    assert all(len(net[k]) == 2 for k in ("bandwidth", "latency"))
    assert net["bandwidth"][0] > net["bandwidth"][1] > 0 and net["latency"][1] > net["latency"][0] > 0
    for f in ("tiny.system.json", "tiny.system_roofline.json"):
        s = json.loads((out / f).read_text())
        for k in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all"):
            assert len(s[f"{k}-implementation"]) == 2
        assert s["preferred-dataset-splits"] == 1 and s["active-chunks-per-dimension"] == 1
        assert s["peak-perf"] == pytest.approx(989.4, rel=0.01) and s["local-mem-bw"] == pytest.approx(3350, rel=0.01)
    assert json.loads((out / "tiny.remote_memory.json").read_text()) == {"memory-type": "NO_MEMORY_EXPANSION"}
    readme = (out / "tiny.README.md").read_text()
    cmd = next(line.strip() for line in readme.splitlines() if line.strip().startswith("AstraSim_"))
    assert cmd.startswith("AstraSim_Analytical_Congestion_Unaware --workload-configuration=tiny ")
    for arg in cmd.split()[1:]:
        key, _, value = arg.partition("=")
        assert key.startswith("--") and (value == "tiny" or (out / value).exists()), arg
    man = json.loads((out / "tiny.manifest.json").read_text())
    assert man["astra_sim"]["network"] == "tiny.network.yml"


def test_network_dims_follow_the_cluster():
    one = build_graph(make_training_job("llama3-8b", gpu="h100", num_gpus=8, plan="tp=8,sp=1", global_batch=8,
                                        seq_len=1024))
    from clustertwin.calibrate.profile import profile_for
    d = network_dims(one, profile_for(one.job.cluster.gpu))
    assert d["topology"] == ["Switch"] and d["npus_count"] == [8]
    two = build_graph(tiny_job(num_gpus=64, plan="tp=2,cp=2,pp=2,dp=8,sp=1", global_batch=16))
    d2 = network_dims(two, profile_for(two.job.cluster.gpu))
    assert d2["npus_count"] == [8, 8] and d2["bandwidth"][0] == d["bandwidth"][0]


@needs_chakra
def test_chakra_compact_layout_expands_to_the_same_files(tiny_chakra, tmp_path):
    """The compact layout (one template per stage) expands, rank by rank, to exactly the files the
    per-rank layout writes, which decode with mlc-chakra's own reader and jsonizer."""
    out, _ = tiny_chakra
    res = write_chakra(build_graph(tiny_job()), tmp_path / "c", "tiny", layout="compact")
    assert res.layout == "compact" and res.files == 2 and not list((tmp_path / "c").glob("tiny.*.et"))
    assert res.bytes_written < 0.25 * sum((out / f"tiny.{r}.et").stat().st_size for r in range(16))
    dst, files, _ = expand(tmp_path / "c", "tiny", [0, 9, 15], tmp_path / "x")
    assert files == 3 and (dst / "tiny.groups.json").exists() and (dst / "tiny.network.yml").exists()
    for r in (0, 9, 15):
        assert (dst / f"tiny.{r}.et").read_bytes() == (out / f"tiny.{r}.et").read_bytes()
    proc = subprocess.run([*_jsonizer(), "--input_filename", str(dst / "tiny.9.et"), "--output_filename",
                           str(tmp_path / "r9.json")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert len(_decode_json_stream((tmp_path / "r9.json").read_text())) == 1 + len(read_trace(dst / "tiny.9.et")[1])


def test_parse_ranks():
    assert parse_ranks("0,8,10-12", 16) == [0, 8, 10, 11, 12]
    assert parse_ranks("all", 3) == [0, 1, 2]


@needs_chakra
def test_trace_expand_cli_and_bad_input(tmp_path, capsys):
    args = ["--model", "gpt3-125m", "--gpu", "h100", "-n", "8", "--plan", "tp=2,pp=2,dp=2", "--global-batch", "8",
            "--seq-len", "1024"]
    code = main(["trace", "--format", "chakra", "--out", str(tmp_path / "et"), "--layout", "compact", *args])
    _, err = capsys.readouterr()
    assert code == 0, err
    code = main(["trace-expand", str(tmp_path / "et"), "--ranks", "4-7", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["files"] == 4 and sorted(p.name for p in (tmp_path / "et").glob("*.et")) == \
        [f"workload.{r}.et" for r in range(4, 8)]
    for argv, field in ((["trace-expand", str(tmp_path / "et"), "--ranks", "8"], "error: ranks"),
                        (["trace-expand", str(tmp_path / "et"), "--ranks", "a-b"], "error: ranks"),
                        (["trace-expand", str(tmp_path / "nothing")], "error: directory"),
                        (["trace", "--format", "chakra", "--out", str(tmp_path / "y"), "--layout", "zip", *args],
                         "error: layout")):
        code = main(argv)
        _, err = capsys.readouterr()
        assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith(field), (argv, err)


# ---- Perfetto ----------------------------------------------------------------------------------------
def test_perfetto_timeline_golden(tmp_path):
    path = tmp_path / "timeline.json"
    n = write_perfetto(simulate(tiny_job()), path)
    text = path.read_text(encoding="utf-8")
    doc = json.loads(text)
    assert len(doc["traceEvents"]) == n and doc["displayTimeUnit"] == "ms"
    check_golden("perfetto_tiny.json", text)


def test_perfetto_timeline_structure():
    r = simulate(tiny_job())
    doc = perfetto_trace(r)
    ev = doc["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
    assert sorted(procs) == [0, 8]                        # one process per pipeline stage
    threads = {e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    assert {"compute", "TP comm", "CP comm", "DP comm", "pipeline p2p"} <= threads
    slices = [e for e in ev if e["ph"] == "X"]
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in slices)
    assert any(e["name"].startswith("L0 attn.qkv") for e in slices)
    gemm = next(e for e in slices if e["name"] == "L0 attn.qkv")
    assert gemm["args"]["flops"] > 0 and gemm["args"]["bytes"] > 0 and gemm["args"]["layer"] == "L0"
    comm = next(e for e in slices if e["cat"] == "tp_comm")
    assert comm["args"]["comm_bytes"] > 0 and comm["args"]["group"] == "tp"
    assert max(e["ts"] + e["dur"] for e in slices) == pytest.approx(r.step_time_s * 1e6, abs=0.01)
    by_thread = defaultdict(list)
    for e in slices:
        by_thread[(e["pid"], e["tid"])].append(e)
    for evs in by_thread.values():      # slices on a thread nest or follow each other, never overlap in part
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        for a, b in zip(evs, evs[1:]):
            assert b["ts"] >= a["ts"] + a["dur"] - 1e-6 or b["ts"] + b["dur"] <= a["ts"] + a["dur"] + 1e-6


def test_perfetto_ranks_and_layer_detail():
    r = simulate(tiny_job(), slow_rank=9, slowdown=1.5)
    doc = perfetto_trace(r, ranks=[9, 8, 1], detail="layer")
    procs = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert set(procs) == {9, 8, 1} and "slow GPU" in procs[9]
    compute = [e for e in doc["traceEvents"] if e.get("cat") == "compute"]
    assert all(e["name"].split()[-1] in ("fwd", "bwd") or e["name"] == "optimizer.adam" for e in compute)
    # the slow GPU's layers take longer than its TP peer's, whose extra time is waiting
    dur = {pid: sum(e["dur"] for e in compute if e["pid"] == pid and e["name"] == "L1 fwd") for pid in (9, 8)}
    assert dur[9] >= dur[8]


def test_perfetto_cli(tmp_path, capsys):
    path = tmp_path / "timeline.json"
    code = main(["trace", "--format", "perfetto", "--out", str(path), "--model", "gpt3-125m", "--gpu", "h100",
                 "-n", "8", "--plan", "tp=2,pp=2,dp=2", "--global-batch", "8", "--seq-len", "1024", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    doc = json.loads(path.read_text())
    assert data["events"] == len(doc["traceEvents"]) and "traceEvents" in doc
    code = main(["trace", "--format", "perfetto", "--out", str(path), "--ranks", "0,x"])
    _, err = capsys.readouterr()
    assert code == 2 and "ranks" in err and len(err.strip().splitlines()) == 1
    code = main(["trace", "--format", "perfetto", "--out", str(path), "--ranks", "100000"])
    _, err = capsys.readouterr()
    assert code == 2 and "rank" in err


# ---- JSON graph --------------------------------------------------------------------------------------
def test_graph_json_golden():
    doc = graph_to_json(build_graph(tiny_job()))
    check_golden("graph_tiny.json", json.dumps(doc, indent=1, sort_keys=True) + "\n")


def test_graph_json_schema():
    job = tiny_job(plan="tp=2,cp=2,pp=2,vpp=1,dp=2,sp=1")
    pred = predict_job(job)
    doc = graph_to_json(pred.graph)
    assert doc["schema"] == SCHEMA and doc["version"] == VERSION
    assert doc["num_microbatches"] == pred.graph.num_microbatches and doc["schedule"] == "1f1b"
    ids = {op["id"] for op in doc["ops"]}
    assert ids == set(range(len(doc["ops"])))
    for st in doc["stages"]:
        refs = [i for b in st["blocks"] for k in ("fwd", "bwd", "recompute") for i in b[k]]
        refs += st["p2p"] + st["step_ops"] + st["microbatch_dp_ops"]
        assert set(refs) <= ids
        layers = [s["layer"] for c in st["chunks"] for s in c if s["layer"] >= 0]
        assert len(layers) == sum(st["chunk_layers"])
    comm = [op for op in doc["ops"] if op["kind"] in ("collective", "p2p")]
    assert comm and all({"collective", "group", "comm_bytes", "overlappable"} <= set(op) for op in comm)
    # priced with the same Pricer as predict
    pricer = Pricer(pred.graph)
    first = pred.graph.stages[0].blocks[0].fwd[0]
    assert doc["ops"][0]["duration_s"] == pytest.approx(pricer.time(first))


def test_graph_json_cli(tmp_path, capsys):
    path = tmp_path / "g.json"
    code = main(["trace", "--format", "json", "--out", str(path)])
    _, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(path.read_text())
    assert doc["schema"] == SCHEMA and doc["job"]["model"]["name"] == "llama3-8b"
    code = main(["trace", "--format", "xml", "--out", str(path)])
    _, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1
    code = main(["trace", "--format", "json"])
    _, err = capsys.readouterr()
    assert code == 2 and err.startswith("error: out: missing")
    code = main(["trace", "--out", str(path)])
    _, err = capsys.readouterr()
    assert code == 2 and err.startswith("error: format: missing") and "chakra" in err


@needs_chakra
def test_chakra_cli(tmp_path, capsys):
    code = main(["trace", "--format", "chakra", "--out", str(tmp_path / "et"), "--name", "gpt", "--model", "gpt3-125m",
                 "--gpu", "h100", "-n", "8", "--plan", "tp=2,pp=2,dp=2", "--global-batch", "8", "--seq-len", "1024",
                 "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    assert data["ranks"] == 8 and len(list((tmp_path / "et").glob("gpt.*.et"))) == 8
