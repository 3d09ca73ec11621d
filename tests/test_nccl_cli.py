"""A job's NCCL_ALGO / NCCL_PROTO set by the user: `clustertwin collective --nccl-algo/--nccl-proto`, a
cluster file's ``nccl_env`` (priced by every NetworkPricer on that cluster), NCCL's list syntax
(specs/nccl.py) checked by hand and by hypothesis, and bad values refused in one line."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clustertwin.calibrate.profile import profile_for
from clustertwin.catalog import cluster_for_gpu, load_cluster
from clustertwin.cli import main
from clustertwin.cluster.collective import price_collective, with_nccl_env
from clustertwin.cost.network import NetworkPricer
from clustertwin.errors import SpecError
from clustertwin.parallel.layout import place_group
from clustertwin.specs.nccl import MODEL_ALGORITHMS, MODEL_PROTOCOLS, NCCL_ALGO_NAMES, NcclEnv, parse_nccl_list

GiB, MiB = 1 << 30, 1 << 20


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# ---- the parser, as NCCL's parseList reads the variables ----------------------------------------------

@pytest.mark.parametrize("text, want", [
    ("Ring", ("ring",)), ("ring,TREE", ("ring", "tree")), (" Tree , Ring ", ("ring", "tree")),
    ("NVLS", ("nvls",)), ("NVLSTree", ("nvls_tree",)), ("CollNet", ("collnet_direct", "collnet_chain")),
    ("^NVLS,NVLSTree", ("ring", "tree", "pat", "collnet_direct", "collnet_chain")),
])
def test_nccl_algo_names(text, want):
    assert parse_nccl_list(text, "NCCL_ALGO") == want


@pytest.mark.parametrize("text, want", [("Simple", ("simple",)), ("^LL128", ("ll", "simple")),
                                        ("ll,ll128", ("ll", "ll128")), ("LL128,Simple", ("ll128", "simple"))])
def test_nccl_proto_names(text, want):
    assert parse_nccl_list(text, "NCCL_PROTO") == want


@pytest.mark.parametrize("text", ["Rong", "", "Ring,,Tree", "^Ring,Tree,NVLS,NVLSTree,PAT,CollNet",
                                  "allreduce:tree;broadcast:ring", "^"])
def test_bad_nccl_algo_is_refused(text):
    with pytest.raises(SpecError) as e:
        parse_nccl_list(text, "NCCL_ALGO", "nccl_algo")
    assert e.value.field == "nccl_algo" and e.value.fix


_ALGO_SPELLINGS = st.sampled_from(sorted(NCCL_ALGO_NAMES))


@settings(max_examples=200, deadline=None)
@given(st.lists(_ALGO_SPELLINGS, min_size=1, max_size=5),
       st.lists(st.booleans(), min_size=20, max_size=20), st.booleans())
def test_parser_is_case_insensitive_and_caret_is_the_complement(names, upper, caret):
    """Any capitalisation reads the same; '^LIST' leaves exactly what 'LIST' removes; the result is in
    the model's order without repeats."""
    text = ",".join("".join(ch.upper() if upper[i % 20] else ch for ch in n) for i, n in enumerate(names))
    plain = parse_nccl_list(text, "NCCL_ALGO")
    assert plain == parse_nccl_list(text.lower(), "NCCL_ALGO")
    assert list(plain) == [a for a in MODEL_ALGORITHMS if a in plain]
    picked = {a for n in names for a in NCCL_ALGO_NAMES[n]}
    assert set(plain) == picked
    rest = set(MODEL_ALGORITHMS) - picked
    if caret and rest:
        assert set(parse_nccl_list("^" + text, "NCCL_ALGO")) == rest
    elif caret:
        with pytest.raises(SpecError):
            parse_nccl_list("^" + text, "NCCL_ALGO")


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyzLT0123456789,^ _-", max_size=20))
def test_parser_never_crashes(text):
    """Any text is either read into a non-empty list of known names or refused as a SpecError."""
    for var, known in (("NCCL_ALGO", MODEL_ALGORITHMS), ("NCCL_PROTO", MODEL_PROTOCOLS)):
        try:
            got = parse_nccl_list(text, var)
        except SpecError as e:
            assert e.field == var
        else:
            assert got and set(got) <= set(known)


# ---- the pricer: a forced Ring on two nodes is NIC-bound ------------------------------------------------

def test_forced_ring_on_two_nodes_is_slower_than_the_tree_at_large_size():
    """Two A100 nodes with 4 x 100 Gb/s NICs each (p4d's EFA): 50 GB/s per node each way, six times less
    than a GPU's NVLink, so the NICs bound both algorithms. A ring over the two nodes crosses the boundary
    once each way, and every link of it carries 2(n-1)/n of the buffer: the node's NICs carry
    2 x 15/16 x S each way, so the ring takes at least that over 50 GB/s (its bus bandwidth is at most
    the node's NIC bandwidth). A tree sends the buffer across once each way (reduce up, broadcast down):
    at large size it is faster, by up to 2 x 15/16."""
    c = cluster_for_gpu("a100-40gb", 16)
    c = c.model_copy(update={"node": c.node.model_copy(update={"nics_per_node": 4,
                                                               "nic_bandwidth_bytes_per_s": 100e9 / 8})})
    node_nic = 4 * 100e9 / 8
    size = 4 * GiB
    ring = price_collective(with_nccl_env(c, "Ring"), "all_reduce", size)
    tree = price_collective(with_nccl_env(c, "Tree"), "all_reduce", size)
    assert (ring.algorithm, tree.algorithm) == ("ring", "tree")
    assert ring.time_s >= 2 * 15 / 16 * size / node_nic
    assert ring.busbw_bytes_per_s <= node_nic
    assert tree.time_s >= size / node_nic          # the tree's own bound: the buffer once each way
    assert tree.time_s < ring.time_s
    assert ring.time_s / tree.time_s <= 2 * 15 / 16 * (1 + 1e-9)
    # NCCL's default picks the faster of the two (or NVLS tree), never the ring here
    assert price_collective(c, "all_reduce", size).time_s <= tree.time_s


def test_nccl_proto_simple_only_never_faster():
    c = cluster_for_gpu("h100-sxm", 16)
    simple = with_nccl_env(c, None, "Simple")
    for size in (1024, 64 * 1024, 16 * MiB, GiB):
        e = price_collective(simple, "all_reduce", size)
        assert e.protocol == "simple"
        assert e.time_s >= price_collective(c, "all_reduce", size).time_s * (1 - 1e-12)


def test_cluster_nccl_env_reaches_every_pricer():
    """The training and serving models build NetworkPricer(cluster, profile): a cluster's nccl_env is
    what they price with, the same as an explicit algorithms= list."""
    c = cluster_for_gpu("h100-sxm", 16).model_copy(update={"nccl_env": NcclEnv(NCCL_ALGO="Ring")})
    pl = place_group(16, 1, 8)
    p = NetworkPricer(c, profile_for(c.gpu))
    explicit = NetworkPricer(cluster_for_gpu("h100-sxm", 16), profile_for(c.gpu), algorithms=("ring",))
    assert p.choose("all_reduce", GiB, pl)[0] == "ring"
    assert p.time("all_reduce", GiB, pl) == pytest.approx(explicit.time("all_reduce", GiB, pl))


def test_nvls_enable_0_takes_nvls_away():
    c = cluster_for_gpu("h100-sxm", 8)
    assert price_collective(c, "all_reduce", GiB).algorithm == "nvls"
    off = c.model_copy(update={"nccl_env": NcclEnv(NCCL_NVLS_ENABLE=0)})
    assert price_collective(off, "all_reduce", GiB).algorithm != "nvls"


def test_an_algorithm_nccl_cannot_run_names_nccl_algo():
    c = with_nccl_env(cluster_for_gpu("a100-80gb", 8), "NVLS")
    with pytest.raises(SpecError) as e:
        price_collective(c, "all_reduce", MiB)
    assert e.value.field == "NCCL_ALGO"


# ---- cluster files and the CLI ---------------------------------------------------------------------------

def _cluster_file(tmp_path, env: str) -> str:
    p = tmp_path / "c.yaml"
    p.write_text(f"name: two-dgx\nnode: dgx-h100\nnum_nodes: 2\nnccl_env:\n{env}", encoding="utf-8")
    return str(p)


def test_cluster_file_nccl_env(tmp_path):
    c = load_cluster(_cluster_file(tmp_path, "  NCCL_ALGO: ring\n  NCCL_PROTO: ^LL128\n"))
    assert c.nccl_env.algorithms == ("ring",) and c.nccl_env.protocols == ("ll", "simple")
    c = load_cluster(_cluster_file(tmp_path, "  NCCL_ALGO: [Tree, Ring]\n  NCCL_NVLS_ENABLE: 0\n"))
    assert c.nccl_env.NCCL_ALGO == "Tree,Ring" and c.nccl_env.algorithms == ("ring", "tree")


@pytest.mark.parametrize("env, field", [("  NCCL_ALGO: Rign\n", "nccl_env.NCCL_ALGO"),
                                        ("  NCCL_PROTO: LL256\n", "nccl_env.NCCL_PROTO"),
                                        ("  NCCL_ALGOS: Ring\n", "nccl_env.NCCL_ALGOS"),
                                        ("  NCCL_NVLS_ENABLE: 2\n", "nccl_env.NCCL_NVLS_ENABLE")])
def test_cluster_file_bad_nccl_env_exits_2_in_one_line(tmp_path, capsys, env, field):
    code, out, err = run(capsys, "collective", "--op", "all_reduce", "--bytes", "1GiB",
                         "--cluster", _cluster_file(tmp_path, env))
    assert code == 2
    line = err.strip()
    assert "\n" not in line and field in line and "Traceback" not in err


@pytest.mark.parametrize("flag, value", [("--nccl-algo", "Rong"), ("--nccl-proto", "LL64"),
                                         ("--nccl-algo", "^Ring,Tree,NVLS,NVLSTree,PAT,CollNet")])
def test_cli_bad_values_exit_2_in_one_line(capsys, flag, value):
    code, out, err = run(capsys, "collective", "--op", "all_reduce", "--bytes", "1GiB", "--gpu", "h100-sxm", flag, value)
    assert code == 2
    assert "\n" not in err.strip() and flag.lstrip("-").replace("-", "_") in err


def test_cli_json_reports_algorithm_protocol_and_env(tmp_path, capsys):
    code, out, _ = run(capsys, "collective", "--op", "all_reduce", "--bytes", "4GiB", "--gpu", "h100-sxm",
                       "--num-gpus", "16", "--nccl-algo", "ring", "--nccl-proto", "Simple", "--json")
    assert code == 0
    d = json.loads(out)
    assert (d["algorithm"], d["protocol"]) == ("ring", "simple")
    assert d["nccl_env"] == {"NCCL_ALGO": "ring", "NCCL_PROTO": "Simple"}
    # the flag overrides the file's value; the file's other variables stay
    f = _cluster_file(tmp_path, "  NCCL_ALGO: Tree\n  NCCL_PROTO: Simple\n")
    code, out, _ = run(capsys, "collective", "--op", "all_reduce", "--bytes", "4GiB", "--cluster", f, "--json")
    assert json.loads(out)["algorithm"] == "tree"
    code, out, _ = run(capsys, "collective", "--op", "all_reduce", "--bytes", "4GiB", "--cluster", f,
                       "--nccl-algo", "Ring", "--json")
    d = json.loads(out)
    assert (d["algorithm"], d["protocol"]) == ("ring", "simple")
    assert d["nccl_env"] == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}


def test_predict_on_a_cluster_with_nccl_env_prices_its_collectives_with_it(tmp_path, capsys):
    """A data-parallel all-reduce over 4 p4de nodes: NCCL_ALGO=Ring in the cluster file takes the tree
    away, so the step's DP communication costs more, and nothing else moves."""
    out = {}
    for name, env in (("auto", ""), ("ring", "nccl_env:\n  NCCL_ALGO: Ring\n")):
        f = tmp_path / f"{name}.yaml"
        f.write_text(f"name: p4de-4\nnode: aws-p4de\nnum_nodes: 4\n{env}", encoding="utf-8")
        code, text, err = run(capsys, "predict", "--model", "llama3-8b", "--cluster", str(f),
                              "--plan", "tp=1,pp=1,dp=32,zero=0", "--json")
        assert code == 0, err
        out[name] = json.loads(text)["breakdown_s"]
    assert out["ring"]["dp_comm"] > out["auto"]["dp_comm"]
    assert out["ring"]["compute"] == out["auto"]["compute"]


def test_ll128_is_off_by_default_on_pcie_nodes_unless_nccl_proto_names_it():
    """NCCL enables LL128 by default only where the GPUs of a node talk over NVLink (tuning.cc
    ncclTopoTuneModel, typeIntra <= PATH_NVB); NCCL_PROTO naming LL128 turns it on anyway."""
    c = cluster_for_gpu("h100-pcie", 8)
    assert c.node.scaleup_fabric == "pcie"
    sizes = [1 << k for k in range(10, 31, 2)]
    assert all(price_collective(c, "all_reduce", s).protocol != "ll128" for s in sizes)
    forced = with_nccl_env(c, None, "LL128")
    assert all(price_collective(forced, "all_reduce", s).protocol == "ll128" for s in sizes)
    named = with_nccl_env(c, None, "LL,LL128,Simple")       # pEnable 1: NCCL's own pick may take it
    assert any(price_collective(named, "all_reduce", s).protocol == "ll128" for s in sizes)
    # NVLink nodes keep it: some mid size runs LL128 on an SXM node
    sxm = cluster_for_gpu("a100-80gb", 8)
    assert any(price_collective(sxm, "all_reduce", s).protocol == "ll128" for s in sizes)


def test_serve_on_a_cluster_with_nccl_env_prices_its_tp_all_reduces_with_it(tmp_path, capsys):
    """Decode's TP all-reduces are small: with NCCL_PROTO=Simple (no LL, whose latency is lowest) each
    costs more, so a TP=8 server on one DGX H100 produces fewer tokens per second."""
    tput = {}
    for name, env in (("auto", ""), ("simple", "nccl_env:\n  NCCL_PROTO: Simple\n  NCCL_ALGO: Ring\n")):
        f = tmp_path / f"{name}.yaml"
        f.write_text(f"name: one-dgx\nnode: dgx-h100\nnum_nodes: 1\n{env}", encoding="utf-8")
        code, text, err = run(capsys, "serve", "--model", "llama3-70b", "--cluster", str(f), "--plan", "tp=8",
                              "--num-requests", "20", "--json")
        assert code == 0, err
        tput[name] = json.loads(text)["output_tokens_per_s"]
    assert tput["simple"] < tput["auto"]
