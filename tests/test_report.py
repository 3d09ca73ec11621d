"""`clustertwin report`: one self-contained HTML page (plotly embedded), its data as JSON, and the
page as a browser draws it (headless Chromium; skipped when none is installed)."""
from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from clustertwin.cli import main
from clustertwin.report.data import VIEWS
from clustertwin.report.views import embedded_data

pytest.importorskip("plotly")

JOB = ["--model", "gpt3-1.3b", "--gpu", "a100-80gb", "--num-gpus", "16", "--plan", "tp=2,pp=2,dp=4",
       "--micro-batch", "1", "--global-batch", "64", "--seq-len", "2048", "--tokens", "20B"]


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, str, dict]:
    d = tmp_path_factory.mktemp("report")
    page, data = d / "report.html", d / "report.json"
    assert main(["report", *JOB, "--sample", "3000", "--out", str(page), "--json", str(data), "--quiet"]) == 0
    return page, page.read_text(encoding="utf-8"), json.loads(data.read_text(encoding="utf-8"))


# ---- the page -----------------------------------------------------------------------------------
def test_page_is_self_contained(report):
    _, text, _ = report
    assert text.startswith("<!DOCTYPE html>")
    assert not re.search(r"<script[^>]*\bsrc\s*=", text, re.I), "every script is inline"
    assert not re.search(r"<link[^>]*href\s*=\s*[\"']?(https?:)?//", text, re.I), "no remote stylesheet"
    assert not re.search(r"@import\s+url\(\s*[\"']?https?:", text, re.I)
    assert "plotly.js" in text and "Plotly.newPlot" in text      # the library itself, embedded


def test_page_has_header_and_every_view(report):
    _, text, data = report
    for key, title in VIEWS.items():
        assert f'<section id="{key}"><h2>{title}</h2>' in text, title
        assert f'id="view-{key}"' in text, key
    for label in ("step time", "tokens/s", "MFU", "memory / GPU", "fits", "goodput", "time to train"):
        assert f'<div class="k">{label}</div>' in text, label
    assert data["job"]["plan_text"] in text and "gpt3-1.3b" in text


def test_json_is_the_page_data_and_matches_predict(report, capsys):
    _, text, data = report
    assert embedded_data(text) == data
    assert data["schema"] == 1 and data["kind"] == "report" and set(data["views"]) == set(VIEWS)
    code, out, _ = run(capsys, "predict", *JOB[:-2], "--json")
    pred = json.loads(out)
    s = data["summary"]
    for k in ("step_time_s", "tokens_per_s", "mfu", "hfu", "fits", "num_microbatches"):
        assert s[k] == pytest.approx(pred[k], rel=1e-9), k
    assert s["memory_per_gpu_bytes"] == pytest.approx(pred["memory_per_gpu_bytes"]["total"])
    assert data["breakdown_s"] == pytest.approx(pred["breakdown_s"])
    assert sum(data["breakdown_s"].values()) == pytest.approx(s["step_time_s"], rel=1e-9)
    mem = data["memory"]
    assert len(mem["stages"]) == 2 and max(st["total_bytes"] for st in mem["stages"]) == pytest.approx(
        pred["memory_per_gpu_bytes"]["total"])
    assert data["job"]["tokens"] == 20e9 and data["job"]["plan_source"] == "given"


def test_landscape_sample_and_front(report):
    _, _, data = report
    s = data["search"]
    assert s["status"] == "ok" and s["num_gpus"] == 16
    sm, fr = s["sample"], s["memory_front"]
    assert sm["size"] == min(3000, s["feasible"]) == len(sm["step_time_s"]) == len(sm["plan_text"])
    assert sm["of"] == s["feasible"]                        # the sample is of every feasible plan
    t, m = np.array(sm["step_time_s"]), np.array(sm["memory_bytes"])
    ft, fm = np.array(fr["step_time_s"]), np.array(fr["memory_bytes"])
    assert (np.diff(fm) > 0).all() and (np.diff(ft) < 0).all()  # a front: more memory buys time
    # every sampled plan is dominated by (or on) the front
    dominated = ((fm[None, :] <= m[:, None] + 1) & (ft[None, :] <= t[:, None] * (1 + 1e-5))).any(axis=1)
    assert dominated.all()
    assert ft.min() == pytest.approx(s["plans"][0]["step_time_s"], rel=1e-5)   # its fast end: the best plan
    assert (m <= s["memory_limit_bytes"] + 1).all()
    assert s["chosen"]["step_time_s"] == data["summary"]["step_time_s"]
    assert s["pareto"][0]["num_gpus"] == 16


def test_goodput_sweep_peaks_at_the_chosen_interval(report):
    _, _, data = report
    g = data["goodput"]
    sw = g["sweep"]
    assert min(sw["interval_s"]) <= g["checkpoint_interval_s"] <= max(sw["interval_s"])
    assert max(sw["goodput"]) <= g["goodput"] * (1 + 1e-9)    # auto: the optimal interval
    assert max(sw["goodput"]) == pytest.approx(g["goodput"], rel=1e-3)
    assert data["summary"]["goodput"] == g["goodput"] and 0 < g["goodput"] < 1
    assert set(g["other_modes"]) <= {"async", "async-serialized", "in-memory"}


def test_timeline_has_every_microbatch_per_stage(report):
    _, _, data = report
    tl = data["timeline"]
    m = tl["num_microbatches"]
    assert tl["pp"] == 2 and len(tl["stages"]) == 2 and m == 64 // 4
    for st in tl["stages"]:
        kinds = [b["kind"] for b in st["bars"]]
        assert sorted(b["microbatch"] for b in st["bars"] if b["kind"] == "forward") == list(range(m))
        assert sorted(b["microbatch"] for b in st["bars"] if b["kind"] == "backward") == list(range(m))
        assert kinds.count("optimizer") == 1 and "grad_sync" in kinds
        for b in st["bars"]:
            assert 0 <= b["start_s"] <= b["end_s"] <= tl["step_time_s"] * (1 + 1e-9)
    assert tl["step_time_s"] == pytest.approx(tl["analytic_step_time_s"], rel=0.1)


# ---- the command ---------------------------------------------------------------------------------
def test_search_chooses_the_plan_without_one(tmp_path, capsys):
    page = tmp_path / "r.html"
    code, out, err = run(capsys, "report", *JOB[:6], "--global-batch", "64", "--seq-len", "2048", "--sample", "200",
                         "--top", "3", "--pareto-points", "1", "--out", str(page), "--json", "-", "--quiet")
    assert code == 0, err
    data = json.loads(out)
    assert data["job"]["plan_source"].startswith("search") and data["search"]["chosen"]["rank"] == 1
    assert data["job"]["tokens_source"].startswith("default")
    assert embedded_data(page.read_text(encoding="utf-8")) == data


def test_no_search_leaves_the_landscape_out(tmp_path, capsys):
    page = tmp_path / "r.html"
    code, out, err = run(capsys, "report", *JOB, "--no-search", "--out", str(page))
    assert code == 0, err
    assert "wrote" in out and page.exists()
    data = embedded_data(page.read_text(encoding="utf-8"))
    assert data["search"]["status"] == "off"
    assert "--no-search" in page.read_text(encoding="utf-8")


def test_report_mistakes_are_one_line(tmp_path, capsys):
    code, _, err = run(capsys, "report", "--model", "gpt3-1.3b", "--no-search", "--out", str(tmp_path / "r.html"))
    assert_one_line_error(code, err, "plan")
    code, _, err = run(capsys, "report", *JOB, "--no-search", "--tokens", "-5", "--out", str(tmp_path / "r.html"))
    assert_one_line_error(code, err, "tokens")
    code, _, err = run(capsys, "report", *JOB, "--no-search", "--out", str(tmp_path))
    assert_one_line_error(code, err, "out")


def test_missing_plotly_names_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "plotly", None)          # import plotly -> ImportError
    code, _, err = run(capsys, "report", *JOB, "--no-search", "--out", str(tmp_path / "r.html"))
    assert_one_line_error(code, err, "plotly", "pip install 'clustertwin[report]'")
    assert not (tmp_path / "r.html").exists()


def test_search_and_sweep_take_quiet(capsys):
    code, out, err = run(capsys, "search", "-m", "gpt3-1.3b", "--gpu", "a100-80gb", "-n", "16", "--global-batch", "64",
                         "--seq-len", "2048", "--top", "2", "--pareto-points", "1", "--quiet")
    assert code == 0, err
    assert "best 2 by step time" in out and err == ""
    code, out, _ = run(capsys, "sweep", "--help")
    assert code == 0 and "--quiet" in out


# ---- a real browser --------------------------------------------------------------------------------
def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome", "headless_shell"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _read_png(path: Path) -> np.ndarray:
    """RGB(A) pixels of an 8-bit, non-interlaced PNG (what Chromium writes), without Pillow."""
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, b"", 0
    while pos < len(raw):
        n, kind = struct.unpack(">I4s", raw[pos:pos + 8])
        body = raw[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    data = zlib.decompress(idat)
    stride = w * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(h):
        f = data[y * (stride + 1)]
        line = bytearray(data[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 2:
            line = bytearray((x + p) & 0xFF for x, p in zip(line, prev))
        elif f in (1, 3, 4):
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                if f == 1:
                    pred = a
                elif f == 3:
                    pred = (a + prev[i]) >> 1
                else:
                    b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        prev = line
    out = np.frombuffer(b"".join(rows), dtype=np.uint8).astype(np.int32).reshape(h, stride)
    return out.reshape(h, w, bpp)[:, :, :3]


def test_page_renders_in_headless_chromium(report, tmp_path):
    browser = _browser()
    if browser is None:
        pytest.skip("no Chromium/Chrome binary installed (Debian: apt-get install chromium)")
    page, _, _ = report
    png = tmp_path / "report.png"
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
           "--hide-scrollbars", "--virtual-time-budget=5000", f"--screenshot={png}", "--window-size=1400,2600",
           page.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert png.exists() and png.stat().st_size > 10_000, proc.stderr[-2000:]
    img = _read_png(png)
    assert img.shape[:2] == (2600, 1400)
    flat = img.reshape(-1, 3)
    ink = np.ones(len(flat), dtype=bool)           # neither the page's grey nor the sections' white
    for bg in ((0xF6, 0xF7, 0xF9), (0xFF, 0xFF, 0xFF)):
        ink &= np.abs(flat - np.array(bg)).sum(axis=1) > 24
    assert ink.mean() > 0.03, f"mostly blank ({ink.mean():.1%} drawn)"
    assert len(np.unique(flat[ink], axis=0)) > 200
    # plotly drew: the compute and forward bars' blue (#4C78A8) and the backward orange (#F58518)
    for rgb in ((0x4C, 0x78, 0xA8), (0xF5, 0x85, 0x18)):
        assert (np.abs(flat - np.array(rgb)).sum(axis=1) < 12).sum() > 2000, rgb


def test_doctests() -> None:
    import doctest

    import clustertwin.report.data as mod
    assert doctest.testmod(mod).failed == 0


def test_a_plan_that_does_not_fit_has_no_goodput() -> None:
    """The report of a plan that cannot run says so where its time to train would be."""
    from clustertwin.report.data import build_report
    d = build_report("llama3-70b", gpu="h100-sxm", num_gpus=8, plan="tp=1,dp=8,zero=0", micro_batch=1,
                     global_batch=8, seq_len=4096, tokens="1T", search=False)
    assert "does not fit" in d["goodput"]["error"] and "sweep" not in d["goodput"]
