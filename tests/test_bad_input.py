"""Bad input found by the adversarial pass of issue 16, each a one-line error naming the file and the
field, exit code 2, before any work: files that are not UTF-8 text or not files, duplicate YAML keys,
values out of range, NaN or of the wrong type, names that would become paths outside --out,
overrides that match no cell, and the command line's own options."""

from __future__ import annotations

import pytest
from test_cli import grid, micro_cell, one_line_error, runner, write

from oxbench_cli import app


def plan(path, *extra):
    return runner.invoke(app, ["run", "--grid", str(path), "--plan", *extra])


@pytest.mark.parametrize(
    "raw,needle",
    [
        (b"\xff\xfe\x00n\x00a", "byte 0xff at offset 0"),  # UTF-16 with its byte-order mark
        (b"name: caf\xe9\n", "byte 0xe9 at offset 9"),  # Latin-1
        (b"\x00\x01\x02\x89PNG", "byte 0x89"),  # binary
    ],
)
def test_a_grid_that_is_not_utf8(tmp_path, raw, needle):
    p = tmp_path / "g.yaml"
    p.write_bytes(raw)
    one_line_error(plan(p), "g.yaml", "not UTF-8", needle)


def test_a_grid_path_that_is_a_directory(tmp_path):
    (tmp_path / "g.yaml").mkdir()
    one_line_error(plan(tmp_path / "g.yaml"), "g.yaml", "is a directory")


def test_duplicate_yaml_keys_are_an_error_not_last_wins(tmp_path):
    p = write(tmp_path, "g.yaml", "name: a\nbase: {train: {lr: 1.0e-3, lr: 1.0e-4}}\naxes: {seed: [0]}\n")
    one_line_error(plan(p), "g.yaml", "duplicate key 'lr'", "line 2")


@pytest.mark.parametrize(
    "section,value,needle",
    [
        ("train", {"lr": -1e-3}, "'train.lr': must be > 0"),
        ("train", {"lr": float("nan")}, "'train.lr': Input should be a finite number"),
        ("train", {"lr": float("inf")}, "'train.lr': Input should be a finite number"),
        ("train", {"batch_size": 0}, "'train.batch_size': must be >= 1"),
        ("train", {"epochs": -1}, "'train.epochs': must be >= 1"),
        ("train", {"grad_accum": 0}, "'train.grad_accum': must be >= 1"),
        ("train", {"warmup_ratio": 1.5}, "'train.warmup_ratio': must be in [0, 1]"),
        ("task", {"steps": 0}, "'task.steps'"),
        ("online", {"n": 0}, "'online.n': must be >= 1"),
        ("online", {"temperature": 0.0}, "'online.temperature': must be > 0"),
        ("eval", {"n_test": 0}, "'eval.n_test': must be >= 1"),
        ("model", {"lora": {"r": 0}}, "'model.lora.r': must be >= 1"),
        ("train", {"lr": "fast"}, "'train.lr': Input should be a valid number"),
        ("checkpoint", {"every": 0}, "'checkpoint.every': must be >= 1"),
        ("checkpoint", {"keep": 0}, "'checkpoint.keep': must be >= 1"),
        ("checkpoint", {"evry": 2}, "'checkpoint.evry'"),
        ("model", {"pretrain": {"mixture": {"ordr": 0.1}}}, "did you mean 'order'"),
        ("model", {"pretrain": {"mixture": {"order": 1.5}}}, "'model.pretrain.mixture'"),
        ("eval", {"lm_eval": {"tasks": {"oxbench_ordr": "general"}}}, "did you mean 'oxbench_order'"),
        ("eval", {"lm_eval": {"tasks": {"oxbench_order": "in_domain"}}}, "'eval.lm_eval.tasks'"),
        ("eval", {"lm_eval": {"limit": 0}}, "'eval.lm_eval.limit': must be >= 1"),
    ],
)
def test_values_out_of_range_nan_or_of_the_wrong_type(tmp_path, micro_model_dir, section, value, needle):
    base = micro_cell(micro_model_dir)
    base[section] = {**base.get(section, {}), **value}
    one_line_error(plan(write(tmp_path, "g.yaml", grid(micro_model_dir, base=base))), "g.yaml", needle)


def test_an_unknown_lm_eval_task_is_named_before_any_work(tmp_path, micro_model_dir):
    """A task that neither oxbench bundles nor lm-eval knows is found in lm-eval's own task index."""
    base = micro_cell(micro_model_dir)
    base["eval"] = {**base.get("eval", {}), "lm_eval": {"tasks": {"arc_challenj": "general"}}}
    one_line_error(plan(write(tmp_path, "g.yaml", grid(micro_model_dir, base=base))), "g.yaml",
                   "'eval.lm_eval.tasks'", "unknown lm-eval task 'arc_challenj'", "did you mean 'arc_challenge'")  # fmt: skip


def test_a_seed_beyond_32_bits(tmp_path, micro_model_dir):
    p = write(tmp_path, "g.yaml", grid(micro_model_dir, axes={"seed": [2**32]}))
    one_line_error(plan(p), "'seed': must be in [0, 4294967295]")


@pytest.mark.parametrize("name", ["../evil", "a/b", "..", ".hidden", ""])
def test_a_grid_name_that_would_leave_out(tmp_path, micro_model_dir, name):
    p = write(tmp_path, "g.yaml", grid(micro_model_dir, name=name))
    one_line_error(plan(p, "--out", str(tmp_path / "out")), "g.yaml", "'name'", "directory name")
    assert not (tmp_path / "out").exists()


def test_an_empty_run_config_is_not_every_default(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("")
    one_line_error(runner.invoke(app, ["run", "--config", str(p), "--plan"]), "c.yaml", "non-empty mapping")


@pytest.mark.parametrize(
    "section,key,needle",
    [
        ("methods", "simpo", "methods.simpo matches no cell"),
        ("scales", "tiny-mm", "scales.tiny-mm matches no cell"),
    ],
)
def test_an_override_that_matches_no_cell(tmp_path, micro_model_dir, section, key, needle):
    p = write(tmp_path, "g.yaml", grid(micro_model_dir, **{section: {key: {"loss": {"beta": 0.2}}}}))
    one_line_error(plan(p), "g.yaml", needle)


@pytest.mark.parametrize(
    "option,needle",
    [
        (["--workers", "0"], "--workers: must be >= 1"),
        (["--workers", "-2"], "--workers: must be >= 1"),
        (["--nproc", "0"], "--nproc: must be >= 1"),
    ],
)
def test_command_line_options_before_the_plan(tmp_path, micro_model_dir, option, needle):
    p = write(tmp_path, "g.yaml", grid(micro_model_dir))
    r = plan(p, *option)
    one_line_error(r, needle)
    assert "plan:" not in r.output


def test_out_that_is_a_file(tmp_path, micro_model_dir):
    p = write(tmp_path, "g.yaml", grid(micro_model_dir))
    (tmp_path / "afile").write_text("")
    one_line_error(plan(p, "--out", str(tmp_path / "afile")), "is not a directory")


def test_every_committed_recipe_still_validates():
    """The new bounds and checks reject no grid the project ships."""
    from pathlib import Path

    from oxbench.grid.spec import expand, load_grid

    recipes = sorted((Path(__file__).parent.parent / "recipes").glob("*.yaml"))
    assert recipes
    for path in recipes:
        grid = load_grid(path)
        if grid.base.get("task", {}).get("name") == "gsm8k" and not Path(grid.base["task"]["path"]).exists():
            continue  # the GPU recipes read GSM8K from ../shared, which a clone elsewhere lacks
        assert expand(grid, str(path)), path


@pytest.mark.parametrize("beta,needle", [("high", "must be a finite number, got 'high'"), (True, "got True")])
def test_a_loss_hyperparameter_of_the_wrong_type(tmp_path, micro_model_dir, beta, needle):
    p = write(
        tmp_path,
        "g.yaml",
        grid(micro_model_dir, axes={"method": ["dpo"]}, methods={"dpo": {"loss": {"beta": beta}}}),
    )
    one_line_error(plan(p), "g.yaml", "hyper-parameter 'beta'", needle)


def test_a_plugin_that_exits_on_import_is_an_error_not_a_silent_exit_0(
    tmp_path, micro_model_dir, monkeypatch
):
    (tmp_path / "exiting_plugin.py").write_text("import sys\nsys.exit(0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("OXBENCH_PLUGINS", raising=False)
    p = write(tmp_path, "g.yaml", grid(micro_model_dir))
    one_line_error(plan(p, "--plugin", "exiting_plugin"), "plugin 'exiting_plugin' called sys.exit(0)")


def test_a_plugin_that_shadows_a_built_in_is_an_error(tmp_path, micro_model_dir, monkeypatch):
    """Before the built-in is imported (a fresh process imports none): the plugin's dpo would have
    taken the built-in's place and its run_ids."""
    from losses import registry

    (tmp_path / "shadow_plugin.py").write_text(
        "import dataclasses\nfrom losses.sft import spec as sft\nspec = dataclasses.replace(sft, name='dpo')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("OXBENCH_PLUGINS", raising=False)
    monkeypatch.delitem(registry._REGISTRY, "dpo", raising=False)
    p = write(tmp_path, "g.yaml", grid(micro_model_dir))
    one_line_error(
        plan(p, "--plugin", "shadow_plugin"),
        "duplicate loss 'dpo'",
        "--plugin shadow_plugin",
        "distribution oxbench",
    )


@pytest.mark.parametrize("content", [b"\x00\xff\x01", b'"just a string"', b'{"status": 3}', b'{"trunc'])
def test_an_unreadable_record_is_not_finished_and_runs_again(tmp_path, micro_model_dir, content):
    """Resuming meets a binary, string, wrongly typed or truncated run.json: the plan says
    ``corrupt`` and counts the cell to run, instead of a traceback."""
    from oxbench.grid.runs import run_dir
    from oxbench.grid.spec import expand, load_grid

    p = write(tmp_path, "g.yaml", grid(micro_model_dir, axes={"method": ["sft"], "seed": [0]}))
    (cell,) = expand(load_grid(p), str(p))
    d = run_dir(tmp_path / "out", cell.grid, cell.run_id())
    d.mkdir(parents=True)
    (d / "run.json").write_bytes(content)
    r = plan(p, "--out", str(tmp_path / "out"))
    assert r.exit_code == 0, r.output
    assert "corrupt" in r.output and "to run 1" in r.output


def test_a_report_path_that_is_a_directory(tmp_path):
    (tmp_path / "res" / "report.html").mkdir(parents=True)
    one_line_error(runner.invoke(app, ["report", str(tmp_path / "res")]), "report.html", "is not a file")


def test_nothing_a_user_can_place_is_unpickled():
    """Security (issue 16): no ``pickle`` and no ``torch.load`` without ``weights_only=True`` in the
    package, and YAML only through the safe loader: a cache file, a checkpoint or a plugin's data is
    read as data, never run as code."""
    import re
    from pathlib import Path

    root = Path(__file__).parent.parent
    offending = []
    for path in [*root.glob("oxbench/**/*.py"), *root.glob("losses/**/*.py"), *root.glob("analysis/**/*.py")]:
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#")[0]
            if (
                re.search(r"\bimport pickle\b|\bpickle\.load|yaml\.(unsafe_)?load\(|yaml\.Loader\b", code)
                and "SafeLoader" not in code
                and "_UniqueKeyLoader" not in code
            ):
                offending.append(f"{path.relative_to(root)}:{i}: {line.strip()}")
            if "torch.load(" in code and "weights_only=True" not in code:
                offending.append(f"{path.relative_to(root)}:{i}: {line.strip()}")
    assert offending == []


def test_checkpoint_settings_leave_the_run_id_alone():
    """How a run is kept is not what it computes: a run checkpointed every 5 steps is the same run."""
    from oxbench.config import RunConfig

    assert RunConfig(checkpoint={"every": 5, "keep": 1}).run_id() == RunConfig().run_id()


# ------------------------------------------------------------------ issue 28: the last seven kinds


def _gsm8k_grid(tmp_path, model_dir, train_text: str):
    d = tmp_path / "data"
    d.mkdir()
    (d / "train.jsonl").write_text(train_text)
    (d / "test.jsonl").write_text('{"question": "1+1?", "answer": "1+1=2\\n#### 2"}\n')
    return write(tmp_path, "g.yaml", grid(model_dir, base={**micro_cell(model_dir), "task": {"name": "gsm8k",
                                                                                         "path": str(d)}}))  # fmt: skip


def test_a_data_file_with_no_rows(tmp_path, micro_model_dir):
    one_line_error(plan(_gsm8k_grid(tmp_path, micro_model_dir, "")), "data", "no problems in split 'train'")


def test_a_data_file_whose_answers_have_no_final_answer(tmp_path, micro_model_dir):
    rows = '{"question": "q", "answer": "no number here"}\n' * 3
    one_line_error(
        plan(_gsm8k_grid(tmp_path, micro_model_dir, rows)), "data", "field 'answer'", "in any of its 3 rows"
    )


def test_a_hub_id_not_in_the_cache_is_an_error_in_offline_mode(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    p = write(tmp_path, "g.yaml", {"name": "g", "base": {"model": {"name": "nobody/no-such-model"}},
                                   "axes": {"method": ["sft"]}})  # fmt: skip
    one_line_error(plan(p), "'nobody/no-such-model'", "not in the Hugging Face cache", "HF_HUB_OFFLINE")
    monkeypatch.delenv("HF_HUB_OFFLINE")  # online, the id may still be downloaded: it plans
    assert plan(p).exit_code == 0


def test_an_out_that_cannot_be_written(tmp_path, micro_model_dir):
    (tmp_path / "file").write_text("")
    g = write(tmp_path, "g.yaml", grid(micro_model_dir))
    r = runner.invoke(app, ["run", "--grid", str(g), "--out", str(tmp_path / "file" / "below")])
    one_line_error(r, "--out", "below")
    r = runner.invoke(app, ["run", "--grid", str(g), "--out", "/proc/oxbench-no-such-dir"])
    one_line_error(r, "--out /proc/oxbench-no-such-dir: cannot be written")


@pytest.mark.parametrize(
    "over,needle",
    [
        ({"base": {"model.name.x": 1}}, "'model.name.x'"),
        ({"methods": {"sft": {"train.lr.x": 1}}}, "'train.lr'"),
        ({"axes": {"train.lr.x": [1]}}, "unknown axis 'train.lr.x'"),
    ],
)
def test_a_dotted_override_of_the_wrong_shape(tmp_path, micro_model_dir, over, needle):
    one_line_error(plan(write(tmp_path, "g.yaml", grid(micro_model_dir, **over))), "g.yaml", needle)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--workers", "abc"], "Invalid value for '--workers'"),
        (["--nproc", "2.5"], "Invalid value for '--nproc'"),
        (["--executor", "slurn"], "Invalid value for '--executor'"),  # typer's choice (local, ray, slurm)
        (["--bogus"], "No such option: --bogus"),
    ],
)
def test_an_option_value_of_the_wrong_type_is_one_line(tmp_path, micro_model_dir, args, needle):
    """Through the installed command (``main``), not click's six-line usage box."""
    import subprocess
    import sys

    g = write(tmp_path, "g.yaml", grid(micro_model_dir))
    proc = subprocess.run([sys.executable, "-m", "oxbench_cli", "run", "--grid", str(g), "--plan", *args],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and needle in proc.stderr, proc.stderr


def test_duplicate_run_ids_are_named_and_the_newer_record_kept(tmp_path):
    """Two records with one run_id (a copied run directory): the report keeps the newer and says so."""
    import os
    import shutil
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "results" / "quickstart"
    root = tmp_path / "res"
    shutil.copytree(src, root / "quickstart", ignore=shutil.ignore_patterns("report.html", "figures", "tb"))
    first = sorted(p for p in (root / "quickstart").iterdir() if (p / "run.json").exists())[0]
    copy = root / "zz" / first.name
    shutil.copytree(first, copy)
    old = first / "run.json"
    os.utime(old, (old.stat().st_atime, old.stat().st_mtime - 100))
    r = runner.invoke(app, ["report", str(root)])
    assert r.exit_code == 0, r.output
    assert f"{old}" in r.output and "newer and kept" in r.output, r.output
    html = (root / "report.html").read_text()
    assert f"kept the newer {copy / 'run.json'}" in html and f"passed over {old}" in html


@pytest.mark.parametrize(
    "text,needle",
    [
        (
            "name: g\nbase: {model: {name: tiny-s}}\naxes: {method: [sft], train.lr: [yes]}\n",
            "lr is a boolean (true)",
        ),
        ("name: g\nbase: {train: {max_steps: on}}\naxes: {method: [sft]}\n", "max_steps is a boolean (true)"),
        ("name: g\nbase: {eval: {n_test: no}}\naxes: {method: [sft]}\n", "n_test is a boolean (false)"),
    ],
)
def test_a_yaml_boolean_is_not_a_number(tmp_path, text, needle):
    """YAML 1.1 reads yes/no/on/off as booleans; a boolean where a number belongs is an error (it was a
    learning rate of 1.0), while a boolean setting still takes one."""
    one_line_error(plan(write(tmp_path, "g.yaml", text)), "g.yaml", needle, "not a number")
    ok = write(tmp_path, "ok.yaml", "name: g\nbase: {model: {lora: {enabled: yes}}}\naxes: {method: [sft]}\n")
    assert plan(ok).exit_code == 0


def test_a_model_path_with_no_model_in_it(tmp_path):
    (tmp_path / "empty").mkdir()
    for name in ("/etc", str(tmp_path / "empty")):
        p = write(
            tmp_path, "g.yaml", {"name": "g", "base": {"model": {"name": name}}, "axes": {"method": ["sft"]}}
        )
        one_line_error(plan(p), "g.yaml", repr(name), "no model in it (no config.json)")


@pytest.mark.parametrize("where", ["file", "under_a_file"])
def test_an_unusable_cache_is_one_line_naming_oxbench_cache(tmp_path, micro_model_dir, monkeypatch, where):
    (tmp_path / "afile").write_text("")
    cache = tmp_path / "afile" if where == "file" else tmp_path / "afile" / "cache"
    monkeypatch.setenv("OXBENCH_CACHE", str(cache))
    p = write(tmp_path, "c.yaml", micro_cell(micro_model_dir) | {"method": "sft"})
    res = runner.invoke(app, ["run", "--config", str(p), "--out", str(tmp_path / "out")])
    one_line_error(res, f"OXBENCH_CACHE={cache}", "cannot be used", "writable directory")
    assert not list((tmp_path / "out").rglob("run.json"))  # nothing started


def test_the_plan_of_a_million_cells_is_a_summary_in_seconds(tmp_path):
    """Past 5,000 cells ``--plan`` prints a summary in bounded memory (it took 38 s at 10^4 cells and
    gave nothing within a minute at 10^6), still checking every value of every axis."""
    import time

    ten = list(range(10))
    axes = {"method": ["sft", "dpo", "sgrpo", "grpo", "kto", "ipo", "simpo", "orpo", "cpo", "rloo"], "seed": ten,
            "train.lr": [1e-4 * (i + 1) for i in ten], "train.max_steps": [i + 1 for i in ten],
            "train.warmup_ratio": [i / 10 for i in ten], "data.n_train": [8 * (i + 1) for i in ten]}  # fmt: skip
    g = {"name": "huge", "base": {"model": {"name": "tiny-s"}}, "axes": axes}
    t0 = time.monotonic()
    res = plan(write(tmp_path, "g.yaml", g))
    assert res.exit_code == 0, res.output
    assert time.monotonic() - t0 < 10
    assert "plan: 1,000,000 cells" in res.output and "checked: 55 cells" in res.output
    axes["data.n_train"][-1] = -8  # the last value of the last axis: still found
    one_line_error(plan(write(tmp_path, "g.yaml", g)), "g.yaml", "n_train")


def test_a_model_block_left_empty(tmp_path):
    """``model:`` with nothing after it (YAML's null), found by the fuzz pass: one line naming the field,
    not an AttributeError."""
    p = write(tmp_path, "g.yaml", "name: g\nbase: {model: null}\naxes: {seed: [0]}\n")
    one_line_error(plan(p), "g.yaml", "base.model: must be a block of settings")
