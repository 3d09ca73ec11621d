"""Caches that make repeated calls fast must never change an answer: catalog presets are built once
and shared (specs are frozen), predict() by names answers a repeated call from memory, and a copy of a
spec with changed fields derives its properties from the new fields."""
from __future__ import annotations

import pytest

import clustertwin
from clustertwin.catalog import load_gpu, load_model

KW = dict(gpu="a100-80gb", num_gpus=64, plan="tp=8,pp=2,dp=4", micro_batch=1, global_batch=64, seq_len=2048)


def test_a_preset_is_built_once_and_shared() -> None:
    assert load_model("gpt3-13b") is load_model("GPT3_13B")
    assert load_gpu("h100") is load_gpu("h100-sxm")


def test_a_copy_derives_its_properties_from_its_own_fields() -> None:
    m = load_model("gpt3-13b")
    before = m.params_total                         # computed and cached on the shared preset
    wider = m.model_copy(update={"hidden_size": 5140, "ffn_hidden_size": 4 * 5140})
    assert wider.params_total > before
    assert load_model("gpt3-13b").params_total == before


def test_predict_by_names_repeats_the_same_answer() -> None:
    a = clustertwin.predict("gpt3-13b", **KW)
    b = clustertwin.predict("gpt3-13b", **KW)
    assert a is b
    fresh = clustertwin.predict_job(clustertwin.make_training_job("gpt3-13b", **KW))
    assert fresh.step_time_s == a.step_time_s and fresh.memory.total_bytes == a.memory.total_bytes


def test_a_different_call_is_a_different_prediction() -> None:
    a = clustertwin.predict("gpt3-13b", **KW)
    b = clustertwin.predict("gpt3-13b", **{**KW, "plan": "tp=4,pp=2,dp=8"})
    assert b is not a and b.job.plan.tp == 4


def test_a_model_file_is_read_again_on_every_call(tmp_path) -> None:
    f = tmp_path / "tiny.yaml"
    base = load_model("gpt3-13b").model_dump(exclude_none=True)
    f.write_text("\n".join(f"{k}: {v}" for k, v in {**base, "num_layers": 8}.items()
                           if not isinstance(v, (dict, list))) + "\n")
    a = clustertwin.predict(str(f), **KW)
    f.write_text(f.read_text().replace("num_layers: 8", "num_layers: 16"))
    b = clustertwin.predict(str(f), **KW)
    assert a.job.model.num_layers == 8 and b.job.model.num_layers == 16


def test_predictions_are_immutable() -> None:
    p = clustertwin.predict("gpt3-13b", **KW)
    with pytest.raises(AttributeError):
        p.step = None  # type: ignore[misc]


def test_each_subcommand_module_defines_the_commands_the_lazy_registry_lists() -> None:
    """`clustertwin CMD` imports only CMD's module; the map it uses must say what each module defines."""
    import importlib

    import typer

    from clustertwin import cli
    assert set(cli._SUBCOMMAND_MODULES) == set(cli._COMMANDS_OF)
    for module, commands in cli._COMMANDS_OF.items():
        app = typer.Typer()
        importlib.import_module(module).register(app)
        names = {c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands}
        assert names == set(commands), module


def test_running_a_builtin_command_does_not_import_the_subcommands() -> None:
    import json
    import subprocess
    import sys
    code = ("import sys; from clustertwin.cli import main; main(['predict', '--json']); "
            "print('MODS', sorted(m for m in sys.modules if m.startswith('clustertwin.') and m.endswith('.cli')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    mods = out.rsplit("MODS", 1)[1].strip()
    assert json.loads(mods.replace("'", '"')) == ["clustertwin.cli"]
