"""Sweeps: Parquet that DuckDB reads, restarts that neither redo nor duplicate finished cells (also
after a kill), error cells, spec errors as one line, and the Ray executor on a local Ray instance."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

duckdb = pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from clustertwin.cli import main  # noqa: E402
from clustertwin.errors import ClusterTwinError  # noqa: E402
from clustertwin.search.sweep import load_spec, make_spec, run_sweep  # noqa: E402

SPEC = """
models: [gpt3-125m, gpt3-350m]
clusters:
  - {gpu: a100-80gb, num_gpus: [8, 16]}
global_batch: [32]
seq_len: 1024
objectives: [time]
top: 2
"""


def _write(tmp_path: Path, text: str = SPEC) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(text)
    return p


def _rows(out: Path, where: str = "TRUE") -> list[tuple]:
    return duckdb.sql(f"SELECT cell_id, model, num_gpus, global_batch, rank, plan, step_time_s, status "
                      f"FROM read_parquet('{out}/*.parquet') WHERE {where} ORDER BY ALL").fetchall()


def test_sweep_writes_parquet_duckdb_reads(tmp_path) -> None:
    sw = load_spec(_write(tmp_path))
    out = tmp_path / "out"
    s = run_sweep(sw, out, workers=1)
    assert (s.cells, s.computed, s.already_done, s.failed) == (4, 4, 0, 0)
    rows = _rows(out)
    assert len(rows) == 4 * 2 and all(r[-1] == "ok" for r in rows)
    best = duckdb.sql(f"SELECT model, num_gpus, global_batch, step_time_s FROM read_parquet('{out}/*.parquet') "
                      "WHERE rank = 1 ORDER BY model, num_gpus, global_batch").fetchall()
    assert len(best) == 4
    # more GPUs, same batch: faster
    by = {(m, n, b): t for m, n, b, t in best}
    assert by[("gpt3-125m", 16, 32)] < by[("gpt3-125m", 8, 32)]
    # the README's query
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    query = readme.split("```sql\n", 1)[1].split("```", 1)[0].replace("out/sweep/", f"{out}/")
    assert len(duckdb.sql(query).fetchall()) == 4


def test_restart_neither_redoes_nor_duplicates(tmp_path) -> None:
    sw = load_spec(_write(tmp_path))
    out = tmp_path / "out"
    run_sweep(sw, out, workers=2)            # a pool of two local processes
    before = _rows(out)
    again = run_sweep(sw, out, workers=1)
    assert (again.computed, again.already_done) == (0, 4)
    # a cell lost, and a temporary file left by a sweep killed while writing
    parts = sorted(out.glob("cell-*.parquet"))
    parts[3].unlink()
    (out / f".{parts[0].stem}.tmp-12345").write_bytes(b"half a file")
    third = run_sweep(sw, out, workers=2)
    assert (third.computed, third.already_done) == (1, 3)
    assert not list(out.glob(".cell-*"))
    assert _rows(out) == before   # same rows, none twice


def test_killed_sweep_restarts_where_it_stopped(tmp_path) -> None:
    spec = _write(tmp_path, SPEC.replace("global_batch: [32]", "global_batch: [16, 32]")
                  .replace("objectives: [time]", "objectives: [time]\npareto_points: 2"))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "clustertwin", "sweep", str(spec), "-o", str(out), "--workers", "1", "--json"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    deadline = time.time() + 60
    while time.time() < deadline and not list(out.glob("cell-*.parquet")) and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = len(list(out.glob("cell-*.parquet")))
    assert done >= 1
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    summary = json.loads(res.stdout)
    assert summary["already_done"] == done and summary["computed"] == 8 - done
    rows = _rows(out)
    keys = [(r[0], r[4]) for r in rows]
    assert len(keys) == len(set(keys)) == 8 * 2


def test_failed_cell_is_an_error_row_and_not_redone(tmp_path) -> None:
    spec = _write(tmp_path, """
models: [megatron-1t, gpt3-125m]
clusters: [{gpu: a100-40gb, num_gpus: 8}]
global_batch: 8
seq_len: 1024
""")
    out = tmp_path / "o"
    s = run_sweep(load_spec(spec), out, workers=1)
    assert (s.computed, s.failed) == (2, 1)
    err = _rows(out, "status = 'error'")
    assert len(err) == 1 and err[0][1] == "megatron-1t"
    msg = duckdb.sql(f"SELECT error FROM read_parquet('{out}/*.parquet') WHERE status = 'error'").fetchall()[0][0]
    assert msg.startswith("plan: no plan")
    assert run_sweep(load_spec(spec), out, workers=1).computed == 0


@pytest.mark.parametrize("text,field", [
    ("models: [gpt3-125m]\nglobal_batch: 8\n", "spec.clusters"),
    ("models: [gpt3-125m]\nclusters: [{gpu: a100-80gb}]\nglobal_batch: 8\n", "clusters.num_gpus"),
    ("models: [gpt3-125m]\nclusters: [{gpu: a100-80gb, num_gpus: 8}]\nglobal_batch: 8\nobjectives: [fast]\n",
     "objectives"),
    ("models: [gpt3-125m]\nclusters: [{gpu: a100-80gb, num_gpus: 8}]\nglobal_batch: 8\ncolour: red\n", "spec.colour"),
    ("models: [gpt3-125m]\nclusters: [{gpu: a100-80gb, num_gpus: 8}]\nglobal_batch: 8\ntokens: lots\n", "tokens"),
    ("- just\n- a list\n", "spec"),
])
def test_bad_spec_is_one_line(tmp_path, text, field, capsys) -> None:
    code = main(["sweep", str(_write(tmp_path, text)), "-o", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {field}") and err.count("\n") == 1


def test_unknown_executor_is_one_line(tmp_path, capsys) -> None:
    code = main(["sweep", str(_write(tmp_path)), "-o", str(tmp_path / "o"), "--executor", "slurm"])
    assert code == 2 and capsys.readouterr().err.startswith("error: executor:")


def test_cells_are_the_grid() -> None:
    spec = make_spec({"models": ["a", "b"], "clusters": [{"gpu": "h100", "num_gpus": [8, 16]}, {"cluster": "eos"}],
                      "global_batch": [1, 2], "objectives": ["time", "cost"], "gpu_hour_price": 2})
    cells = spec.cells()
    assert len(cells) == 2 * 3 * 2 * 2 and len({c["cell_id"] for c in cells}) == len(cells)
    with pytest.raises(ClusterTwinError):
        make_spec({"models": ["a"], "clusters": [{"gpu": "h100", "cluster": "eos", "num_gpus": 8}],
                   "global_batch": 1}).cells()


def test_ray_executor_matches_local(tmp_path) -> None:
    ray = pytest.importorskip("ray")
    spec = _write(tmp_path, SPEC.replace("num_gpus: [8, 16]", "num_gpus: [8]"))
    local = tmp_path / "local"
    run_sweep(load_spec(spec), local, workers=1)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        s = run_sweep(load_spec(spec), tmp_path / "ray", executor="ray")
    finally:
        ray.shutdown()
    assert (s.computed, s.failed, s.executor) == (2, 0, "ray")
    assert _rows(tmp_path / "ray") == _rows(local)
