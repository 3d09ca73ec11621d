"""Chakra traces of a DualPipe plan (export/chakra.py ``_dualpipe_templates``): each rank runs its two
stages (r and p-1-r) in the reference order the replay runs (sim/dualpipe.py), the EP all-to-alls as
collectives of the EP group, pipeline transfers in both directions between neighbouring ranks."""
from __future__ import annotations

import json
import tempfile
from collections import Counter, defaultdict

import pytest

from clustertwin.jobs import make_training_job
from clustertwin.sim.dualpipe import dualpipe_order
from clustertwin.workload.graph import build_graph

pb = pytest.importorskip("chakra.schema.protobuf.et_def_pb2")
from clustertwin.export.chakra import read_trace, write_chakra  # noqa: E402

# Mixtral 8x7B (32 layers: 8 per stage), pp4 x ep8 x dp8 = 32 ranks, 8 micro-batches (h = 4 per direction)
PLAN = dict(model="mixtral-8x7b", gpu="h800", num_gpus=32, seq_len=4096, global_batch=64, micro_batch=1,
            precision="bf16", framework="hai-llm", plan="tp=1,pp=4,ep=8,dp=8,zero=1")
P, H, STRIDE, WORLD = 4, 4, 8, 32


def _attr(node, name):
    return next((a for a in node.attr if a.name == name), None)


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    out = tmp_path_factory.mktemp("dualpipe")
    res = write_chakra(build_graph(make_training_job(**PLAN)), out, "dp")
    nodes = {r: read_trace(out / f"dp.{r}.et")[1] for r in range(WORLD)}
    return out, res, nodes


def test_every_rank_writes_and_decodes(export) -> None:
    out, res, nodes = export
    assert res.files == WORLD and len(res.nodes_per_stage) == P
    for r, ns in nodes.items():
        assert [n.id for n in ns] == list(range(len(ns)))
        assert all(d < n.id for n in ns for d in n.data_deps)
        # ranks of one pipeline position run the same program
        assert len(ns) == res.nodes_per_stage[r // STRIDE]
    # DualPipe's symmetry: position i and p-1-i hold the same two stages
    assert res.nodes_per_stage[0] == res.nodes_per_stage[3] and res.nodes_per_stage[1] == res.nodes_per_stage[2]


def test_astra_sim_attributes(export) -> None:
    """What ASTRA-sim needs (docs/trace.md): num_ops > 0 and tensor_size > 0 on every compute node."""
    _, _, nodes = export
    for ns in nodes.values():
        for n in ns:
            if n.type == pb.COMP_NODE:
                assert _attr(n, "num_ops").int64_val > 0 and _attr(n, "tensor_size").uint64_val > 0


def test_node_counts_per_rank(export) -> None:
    """Sends and receives: an end rank (0, p-1) starts one direction's forwards and the other's
    backwards, so it receives 2h chunks and sends 2h; a middle rank receives and sends all 4h.
    All-to-alls: dispatch and combine in each forward and backward of each MoE layer, 8 layers per
    stage, two stages, h micro-batches per direction: 8 x 2 x 2 x 2 x h."""
    _, _, nodes = export
    for r, ns in nodes.items():
        pos = r // STRIDE
        c = Counter(n.type for n in ns)
        want = 2 * H if pos in (0, P - 1) else 4 * H
        assert c[pb.COMM_SEND_NODE] == want and c[pb.COMM_RECV_NODE] == want
        a2a = [n for n in ns if n.type == pb.COMM_COLL_NODE and _attr(n, "comm_type").int64_val == pb.ALL_TO_ALL]
        assert len(a2a) == 8 * 2 * 2 * 2 * H
        # the chunks of the reference order: its forwards and backwards, each direction h times
        order = dualpipe_order(P, pos, H)
        fwd = sum(1 for it in order if it[0] == "F") + sum(1 for it in order if it[0] == "FB")
        assert fwd == 2 * H
        assert {n.name.split(".")[0] for n in a2a} == {"F0", "F1", "B0", "B1"}


def test_all_to_alls_on_the_ep_group(export) -> None:
    out, _, nodes = export
    groups = json.loads((out / "dp.groups.json").read_text())
    issued = defaultdict(dict)
    for r, ns in nodes.items():
        for n in ns:
            if n.type == pb.COMM_COLL_NODE:
                pg = _attr(n, "pg_name").string_val
                assert r in groups[pg]
                if _attr(n, "comm_type").int64_val == pb.ALL_TO_ALL:
                    assert len(groups[pg]) == 8          # ep = 8
                issued[pg].setdefault(r, []).append((_attr(n, "comm_type").int64_val, _attr(n, "comm_size").int64_val))
    for gid, by_rank in issued.items():
        assert sorted(by_rank) == sorted(groups[gid])
        seqs = list(by_rank.values())
        assert all(s == seqs[0] for s in seqs), f"members of group {gid} issue the same collectives in order"


def test_sends_and_receives_pair_up_in_both_directions(export) -> None:
    _, _, nodes = export
    sends, recvs = Counter(), Counter()
    for r, ns in nodes.items():
        for n in ns:
            if n.type in (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE):
                src, dst = _attr(n, "comm_src").int32_val, _attr(n, "comm_dst").int32_val
                assert abs(src - dst) == STRIDE, "neighbouring pipeline ranks of the same replica"
                key = (src, dst, _attr(n, "comm_tag").int32_val, _attr(n, "comm_size").int64_val)
                if n.type == pb.COMM_SEND_NODE:
                    assert src == r
                    sends[key] += 1
                else:
                    assert dst == r
                    recvs[key] += 1
    assert sends and sends == recvs
    assert all(v == 1 for v in sends.values())
    # both directions: rank 0 sends to rank 8 (forwards of direction 0) and rank 8 to rank 0 (its backwards
    # of direction 0 and forwards of direction 1)
    assert any(k[:2] == (0, 8) for k in sends) and any(k[:2] == (8, 0) for k in sends)


def _a2a_s(graph, stage: int, ph: str) -> float:
    """Priced seconds of the EP all-to-alls of one chunk of ``stage`` in phase ``ph``."""
    from clustertwin.calibrate.profile import profile_for
    from clustertwin.schedule.step import Pricer
    from clustertwin.sim.layout import block_of, chunk_segments
    from clustertwin.sim.program import build_program
    pricer = Pricer(graph, profile_for(graph.job.cluster.gpu))
    total = 0.0
    for s in chunk_segments(graph)[stage][0]:
        b = block_of(graph.stages[stage], s.block)
        prog = build_program(b.fwd if ph == "F" else b.recompute + b.bwd, pricer, graph.plan.tp,
                             bool(graph.plan.overlap_tp_comm))
        total += sum(st.duration_s for st in prog.steps if st.is_comm and st.op.group == "ep")
    return total


def test_compute_matches_the_replay() -> None:
    """The trace's compute (durations, whole microseconds) is the replay's compute busy time of the same rank
    less what the replay puts on its compute stream that the trace writes elsewhere: the framework's host
    time per forward (FrameworkProfile.microbatch_overhead_s, which the 1F1B traces leave out too) and the
    all-to-alls of the unpaired chunks (collective nodes in the trace): both price the same block programs,
    zero-bubble splits and the pairs' SM share."""
    from clustertwin.sim.replay import simulate
    job = make_training_job(**PLAN)
    graph = build_graph(job)
    res = simulate(job)
    with tempfile.TemporaryDirectory() as d:
        write_chakra(graph, d, "x", configs=False)
        for pos in range(P):
            ns = read_trace(f"{d}/x.{pos * STRIDE}.et")[1]
            comp_s = sum(n.duration_micros for n in ns if n.type == pb.COMP_NODE) * 1e-6
            s = res.ranks[pos].summary()
            host_s = 2 * H * graph.framework.microbatch_overhead_s
            stage = {0: pos, 1: P - 1 - pos}
            exposed = sum(_a2a_s(graph, stage[it[1]], it[0]) for it in dualpipe_order(P, pos, H) if it[0] in "FB"
                          and len(it[0]) == 1)
            assert comp_s == pytest.approx(s["compute_busy_s"] + s["optimizer_s"] - host_s - exposed, rel=0.01)


def test_sim_labels_show_both_stages() -> None:
    from clustertwin.export.perfetto import perfetto_trace
    from clustertwin.sim.replay import simulate
    res = simulate(make_training_job(**PLAN))
    assert [r.stage_label for r in res.ranks] == ["0+3", "1+2", "1+2", "0+3"]
    assert res.to_json()["ranks"][1]["stages"] == [1, 2]
    names = [e["args"]["name"] for e in perfetto_trace(res)["traceEvents"] if e["name"] == "process_name"]
    assert names[0].startswith("rank 0 (stages 0+3") and names[1].startswith("rank 8 (stages 1+2")
