"""parse_plan / make_plan / check_plan: hand-checked examples and property tests (hypothesis)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from clustertwin.catalog import cluster_for_gpu
from clustertwin.errors import ClusterTwinError, PlanError
from clustertwin.specs import ModelSpec, Plan, check_plan, make_job, make_plan, parse_plan, stage_layer_split

# ---- parse_plan: hand-checked -----------------------------------------------------------------------


def test_full_megatron_string() -> None:
    p = parse_plan("tp=8,pp=8,vpp=1,dp=16,cp=1,ep=1,sp=1,zero=1,recompute=selective")
    assert (p.tp, p.pp, p.vpp, p.dp, p.cp, p.ep, p.sp, p.zero_stage, p.recompute) == \
        (8, 8, 1, 16, 1, 1, True, 1, "selective")
    assert p.gpus == 1024 and p.model_parallel == 64


@pytest.mark.parametrize("text", ["zero=fsdp", "zero=FSDP", "zero=zero3", "zero=zero-3", "zero=3", "fsdp",
                                  "zero_stage=3", "tp=2, fsdp"])
def test_fsdp_spellings(text: str) -> None:
    assert parse_plan(text).zero_stage == 3


def test_aliases() -> None:
    p = parse_plan("mb=2,gbs=512,vp=2,rc=full")
    assert (p.micro_batch, p.global_batch, p.vpp, p.recompute) == (2, 512, 2, "full")
    q = parse_plan("mbs=4;gb=1024;interleave=3;micro_batch_size=4;global_batch_size=1024")
    assert (q.micro_batch, q.global_batch, q.vpp) == (4, 1024, 3)


def test_whitespace_case_and_separators() -> None:
    p = parse_plan("  TP = 4 ; PP=2 ,, DP = auto , sp ")
    assert (p.tp, p.pp, p.dp, p.sp) == (4, 2, None, True)


def test_defaults_and_empty() -> None:
    for text in ("", ",", " ; ", None):
        p = parse_plan(text)  # type: ignore[arg-type]
        assert (p.tp, p.pp, p.vpp, p.dp, p.cp, p.ep, p.sp, p.zero_stage, p.micro_batch, p.global_batch) == \
            (1, 1, 1, None, 1, 1, False, 1, 1, None)


def test_dp_auto_is_derived() -> None:
    assert parse_plan("tp=8,dp=auto").resolved(64).dp == 8
    assert parse_plan("tp=8,dp=").dp is None


def test_overrides() -> None:
    p = parse_plan("tp=8,pp=2", pp=4, dp=None, micro_batch=2)
    assert (p.tp, p.pp, p.dp, p.micro_batch) == (8, 4, None, 2)


@pytest.mark.parametrize("value,expected", [("1", True), ("true", True), ("on", True), ("yes", True),
                                            ("0", False), ("false", False), ("off", False), ("no", False)])
def test_sp_bools(value: str, expected: bool) -> None:
    assert parse_plan(f"sp={value}").sp is expected


def test_short_round_trips() -> None:
    p = parse_plan("tp=4,pp=4,vpp=2,dp=8,cp=2,ep=2,sp=1,zero=2,mb=2,recompute=full")
    assert parse_plan(p.short()) == p.model_copy(update={"global_batch": None})


@pytest.mark.parametrize("text,field", [
    ("tp=0", "plan.tp"), ("tp=-2", "plan.tp"), ("tp=x", "plan.tp"), ("tp=1e3", "plan.tp"), ("tp=2000", "plan.tp"),
    ("zero=4", "plan.zero_stage"), ("zero=fsdp2", "plan.zero_stage"), ("recompute=some", "plan.recompute"),
    ("sp=2", "plan.sp"), ("mb=0", "plan.micro_batch"), ("gbs=-1", "plan.global_batch"), ("bogus=1", "plan.bogus"),
    ("tp", "plan"), ("tp 8", "plan"), ("precision=fp64", "plan.precision"),
])
def test_parse_errors(text: str, field: str) -> None:
    with pytest.raises(PlanError) as e:
        parse_plan(text)
    assert e.value.field == field
    assert "\n" not in e.value.one_line()
    assert e.value.fix  # every error says how to fix it


def test_unknown_field_lists_the_valid_ones() -> None:
    with pytest.raises(PlanError) as e:
        parse_plan("tensor_parallel=8")
    assert "tp" in e.value.fix and "micro_batch" in e.value.fix


# ---- parse_plan / make_plan: properties ----------------------------------------------------------

KEYS = sorted(set(Plan.model_fields) | {"zero", "mb", "mbs", "gb", "gbs", "vp", "rc", "fsdp", "interleave"})
TOKEN = st.one_of(
    st.sampled_from(KEYS + ["sp", "fsdp", "auto", "=", ",", ";", " ", "true", "1", "0", "-1", "8", "selective",
                            "fsdp", "1e3", "nan", "\n", "\t", "9" * 30]),
    st.text(max_size=6),
)
PLAN_TEXT = st.one_of(
    st.text(max_size=60),
    st.lists(TOKEN, max_size=14).map("".join),
    st.lists(st.tuples(st.sampled_from(KEYS), st.one_of(st.integers(-5, 5000).map(str), TOKEN)), max_size=8)
    .map(lambda kv: ",".join(f"{k}={v}" for k, v in kv)),
)


def _check_error(e: ClusterTwinError) -> None:
    line = e.one_line()
    assert "\n" not in line and "\r" not in line
    assert str(e) == line
    assert e.field.startswith("plan") or e.field == "seq_len"


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=PLAN_TEXT)
def test_arbitrary_text_only_plan_error(text: str) -> None:
    try:
        p = parse_plan(text)
    except PlanError as e:
        _check_error(e)
    else:
        assert isinstance(p, Plan)
        assert p.tp >= 1 and p.pp >= 1 and p.cp >= 1 and p.micro_batch >= 1 and 0 <= p.zero_stage <= 3


VALUES = st.one_of(
    st.integers(min_value=-10**30, max_value=10**30), st.floats(), st.booleans(), st.none(),
    st.text(max_size=10), st.sampled_from(["fsdp", "selective", "full", "bf16", "auto", "1", "true", ""]),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)
FIELD_DICTS = st.dictionaries(st.one_of(st.sampled_from(sorted(Plan.model_fields)), st.text(max_size=8)),
                              VALUES, max_size=8)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields=FIELD_DICTS)
def test_arbitrary_field_dicts_only_plan_error(fields: dict) -> None:
    try:
        p = make_plan(**fields)
    except PlanError as e:
        _check_error(e)
    else:
        assert isinstance(p, Plan)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=PLAN_TEXT, overrides=st.dictionaries(st.sampled_from(sorted(Plan.model_fields)), VALUES, max_size=4))
def test_arbitrary_text_with_overrides_only_plan_error(text: str, overrides: dict) -> None:
    try:
        parse_plan(text, **overrides)
    except PlanError as e:
        _check_error(e)


# ---- check_plan: hand-checked ----------------------------------------------------------------------

DENSE = ModelSpec(name="tiny-dense", num_layers=8, hidden_size=512, num_heads=8, num_kv_heads=2,
                  ffn_hidden_size=1024, vocab_size=1000, max_seq_len=4096, activation="swiglu", norm="rmsnorm",
                  positions="rope", bias=False)
MOE = ModelSpec(name="tiny-moe", num_layers=6, hidden_size=256, num_heads=4, ffn_hidden_size=768, vocab_size=512,
                max_seq_len=2048, activation="swiglu", norm="rmsnorm", positions="rope", bias=False,
                moe_num_experts=8, moe_top_k=2, moe_ffn_hidden_size=256, moe_first_dense_layers=1)
MODELS = [DENSE, MOE]


def test_check_plan_derives_dp_and_global_batch() -> None:
    c = cluster_for_gpu("h100-sxm", 64)
    p = check_plan(DENSE, c, parse_plan("tp=2,pp=4,mb=2"), 4096)
    assert (p.dp, p.global_batch) == (8, 2**21 // 4096)  # default: 2M tokens (a multiple of dp*mb = 16)
    assert p.tp * p.pp * p.dp * p.cp == 64


@pytest.mark.parametrize("model,n,text,seq,field", [
    (DENSE, 16, "tp=2,pp=2,dp=2", 4096, "plan"),            # 8 GPUs planned, 16 present
    (DENSE, 16, "tp=3", 4096, "plan"),                      # 3 does not divide 16
    (DENSE, 16, "tp=16", 4096, "plan.tp"),                  # 8 heads
    (DENSE, 8, "tp=8,pp=1", 4096, None),                    # ok: kv=2 divides tp=8
    (DENSE, 16, "pp=16", 4096, "plan.pp"),                  # 8 layers over 16 stages
    (DENSE, 2, "pp=2,vpp=2,gbs=3", 4096, "plan.global_batch"),   # interleaved: 3 micro-batches, pp=2
    (DENSE, 8, "vpp=2", 4096, "plan.vpp"),
    (DENSE, 8, "cp=8", 1004, "plan.cp"),
    (DENSE, 8, "ep=2", 4096, "plan.ep"),
    (MOE, 8, "ep=16", 2048, "plan.ep"),
    (MOE, 8, "ep=8", 2048, None),
    (MOE, 8, "tp=2,ep=8", 2048, "plan.ep"),                 # dp*cp = 4
    (DENSE, 16, "tp=4,dp=4,mb=2,gbs=12", 4096, "plan.global_batch"),
])
def test_check_plan_examples(model: ModelSpec, n: int, text: str, seq: int, field: str | None) -> None:
    c = cluster_for_gpu("h100-sxm", n)
    plan = parse_plan(text)
    if field is None:
        p = check_plan(model, c, plan, seq)
        assert p.gpus == n
        return
    with pytest.raises(PlanError) as e:
        check_plan(model, c, plan, seq)
    assert e.value.field == field
    _check_error(e.value)


def test_stage_layer_split() -> None:
    assert stage_layer_split(32, 4, 1) == [8, 8, 8, 8]
    assert stage_layer_split(126, 16, 1) == [7] + [8] * 14 + [7]  # Llama 3 405B: embedding + loss as layers
    assert sum(stage_layer_split(30, 4, 2)) == 30
    # otherwise as even as possible, the spare layers on the middle chunks (first/last hold embedding, loss)
    assert stage_layer_split(5, 4, 1) == [1, 2, 1, 1]
    assert stage_layer_split(32, 3, 1) == [11, 11, 10]
    assert stage_layer_split(61, 8, 4) == [1] + [2] * 29 + [1, 1]    # DeepSeek-V3 / Kimi K2 over 32 chunks
    # Llama 3 405B as Meta split it (arXiv 2407.21783 Sec. 3.3.2): the first chunk the embedding alone,
    # the last the output layer and loss alone, one layer in every other of the 16 x 8 chunks
    assert stage_layer_split(126, 16, 8, 0, 0) == [0] + [1] * 126 + [0]
    with pytest.raises(PlanError, match="cannot fill"):
        stage_layer_split(3, 4, 1)


@given(st.integers(1, 300), st.integers(1, 32), st.integers(1, 8))
def test_stage_layer_split_is_balanced_or_rejected(layers: int, pp: int, vpp: int) -> None:
    chunks = pp * vpp
    if layers < chunks:
        with pytest.raises(PlanError):
            stage_layer_split(layers, pp, vpp)
        return
    split = stage_layer_split(layers, pp, vpp)
    assert len(split) == chunks and sum(split) == layers and min(split) >= 1
    assert max(split) - min(split) <= 1
    if chunks > 2 and layers % chunks:
        assert max(split) == max(split[1:-1])   # a spare layer goes to a middle chunk first


# ---- check_plan: properties --------------------------------------------------------------------------

GPU_COUNTS = [1, 2, 3, 4, 6, 8, 16, 24, 32, 64, 128]
CLUSTERS = {n: cluster_for_gpu("h100-sxm", n) for n in GPU_COUNTS}
DIM = st.sampled_from([1, 2, 3, 4, 8, 16])


def _divisors(k: int) -> list[int]:
    return [d for d in range(1, k + 1) if k % d == 0]


@st.composite
def cases(draw) -> tuple[int, Plan]:
    """(GPU count, plan): mostly plans whose product divides the count, some that do not."""
    n = draw(st.sampled_from(GPU_COUNTS))
    left = n

    def dim(choices_if_any: list[int]) -> int:
        nonlocal left
        if draw(st.integers(0, 9)) == 0:  # sometimes anything
            return draw(DIM)
        d = draw(st.sampled_from([x for x in _divisors(left) if x in choices_if_any] or [1]))
        left //= d
        return d

    tp = dim([1, 2, 3, 4, 8, 16])
    cp = dim([1, 2, 4])
    pp = dim([1, 2, 3, 4, 6, 8])
    dp_mode = draw(st.sampled_from(["none", "none", "none", "exact", "exact", "any"]))
    dp = None if dp_mode == "none" else (left if dp_mode == "exact" else draw(DIM))
    fields = dict(
        tp=tp, pp=pp, cp=cp, dp=dp, vpp=draw(st.sampled_from([1, 1, 1, 2, 3])),
        ep=draw(st.sampled_from([1, 1, 2, 4, 8])), micro_batch=draw(st.sampled_from([1, 2, 4])),
        global_batch=draw(st.one_of(st.none(), st.integers(1, 512), st.sampled_from([64, 128, 256, 384]))),
        zero_stage=draw(st.integers(0, 3)), sp=draw(st.booleans()),
        recompute=draw(st.sampled_from(["none", "selective", "full"])),
    )
    return n, make_plan(**fields)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(MODELS), case=cases(), seq_len=st.sampled_from([512, 1000, 1024, 2048, 4096]))
def test_check_plan_returns_consistent_plan_or_plan_error(model: ModelSpec, case: tuple[int, Plan],
                                                          seq_len: int) -> None:
    n, plan = case
    cluster = CLUSTERS[n]
    try:
        p = check_plan(model, cluster, plan, seq_len)
    except PlanError as e:
        _check_error(e)
        return
    assert p.tp * p.pp * p.dp * p.cp == n == cluster.num_gpus
    assert p.global_batch is not None and p.global_batch % (p.dp * p.micro_batch) == 0
    # and what the docstring promises besides
    assert model.num_heads % p.tp == 0
    assert model.kv_heads % p.tp == 0 or p.tp % model.kv_heads == 0
    assert seq_len % p.cp == 0
    assert sum(stage_layer_split(model.num_layers, p.pp, p.vpp)) == model.num_layers
    if p.ep > 1:
        assert model.is_moe and model.moe_num_experts % p.ep == 0 and (p.dp * p.cp) % p.ep == 0
    if p.vpp > 1:
        assert p.pp > 1 and (p.global_batch // (p.dp * p.micro_batch)) % p.pp == 0
    # the fields the user gave are kept
    assert (p.tp, p.pp, p.cp, p.vpp, p.ep, p.micro_batch, p.zero_stage) == \
        (plan.tp, plan.pp, plan.cp, plan.vpp, plan.ep, plan.micro_batch, plan.zero_stage)
    if plan.dp is not None:
        assert p.dp == plan.dp
    if plan.global_batch is not None:
        assert p.global_batch == plan.global_batch
    # a resolved plan is a fixed point
    assert check_plan(model, cluster, p, seq_len) == p
    job = make_job(model, cluster, plan, seq_len)
    assert job.plan == p and job.tokens_per_step == p.global_batch * seq_len


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(model=st.sampled_from(MODELS), n=st.sampled_from(GPU_COUNTS), tp=DIM, pp=DIM, cp=st.sampled_from([1, 2, 4]),
       mb=st.sampled_from([1, 2]), seq_len=st.sampled_from([1024, 2048, 4096]))
def test_check_plan_accepts_plans_that_divide(model: ModelSpec, n: int, tp: int, pp: int, cp: int, mb: int,
                                              seq_len: int) -> None:
    """No false rejections: a plan meeting every documented constraint (dp and batch derived) passes."""
    cluster = CLUSTERS[n]
    kv = model.kv_heads
    assume(n % (tp * pp * cp) == 0)
    assume(model.num_heads % tp == 0 and (kv % tp == 0 or tp % kv == 0) and model.ffn_hidden_size % tp == 0)
    assume(tp <= cluster.gpus_per_node or tp % cluster.gpus_per_node == 0)
    assume(model.num_layers % pp == 0 and seq_len % cp == 0)
    p = check_plan(model, cluster, make_plan(tp=tp, pp=pp, cp=cp, micro_batch=mb), seq_len)
    assert p.dp == n // (tp * pp * cp)


# ---- regressions: bugs found by the property tests, fixed in plan.py / job.py ----------------------------


def test_huge_int_gives_plan_error() -> None:
    with pytest.raises(PlanError):
        make_plan(tp=10**5000)


def test_error_echoes_input_verbatim() -> None:
    with pytest.raises(PlanError) as e:
        parse_plan("tp=Eight")
    assert "'Eight'" in e.value.one_line()
    # recompute and precision values are case-insensitive
    assert parse_plan("recompute=Selective,precision=BF16").recompute == "selective"


def test_fsdp_flag_means_zero3() -> None:
    assert parse_plan("fsdp=1").zero_stage == 3
    assert parse_plan("fsdp=true").zero_stage == 3


def test_make_job_bad_framework_is_plan_error() -> None:
    with pytest.raises(ClusterTwinError):
        make_job(DENSE, cluster_for_gpu("h100-sxm", 8), make_plan(), 4096, framework="jax")


def test_tp_straddling_nodes_rejected() -> None:
    m = ModelSpec(num_layers=4, hidden_size=384, num_heads=12, ffn_hidden_size=1536, vocab_size=100, max_seq_len=512)
    with pytest.raises(PlanError):
        check_plan(m, cluster_for_gpu("h100-sxm", 24), make_plan(tp=3), 512)  # TP group {6,7,8} spans 2 nodes


def test_search_plan_text_reads_back_as_the_same_plan() -> None:
    """What search prints (plan_text, overlaps as ovl=...) is a --plan: pasted back, it predicts the same."""
    from clustertwin.predict import predict_job
    from clustertwin.search import search
    from clustertwin.search.tuner import plan_text
    from clustertwin.specs import make_job
    r = search("gpt3-1.3b", gpu="a100-80gb", num_gpus=16, global_batch=64, seq_len=2048, top=5, pareto_points=1)
    for rp in r.plans:
        pred = rp.prediction
        again = parse_plan(plan_text(pred), global_batch=64, precision=pred.job.plan.precision)
        job = make_job(pred.job.model, pred.job.cluster, again, 2048, pred.job.framework)
        assert predict_job(job).step_time_s == pred.step_time_s
    assert parse_plan("tp=2,ovl=none").overlap_dp_comm is False
    with pytest.raises(PlanError, match="ovl"):
        parse_plan("tp=2,ovl=dp+xx")
