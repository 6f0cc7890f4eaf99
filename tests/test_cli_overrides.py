"""The command line's habits (issue 42, item 5): ``key=value`` overrides after the grid, validated as the
file is, in the run_id as any setting and recorded; enumerated options checked by typer (a bad value,
through the installed command: tests/test_bad_input.py); ``--version``. No test here trains: each reads
a plan."""

from __future__ import annotations

import copy
import typing
from importlib.metadata import version

import pytest
import yaml
from typer.testing import CliRunner

from oxbench.config import RunConfig
from oxbench.grid.overrides import BLOCKS, _OverrideSafeLoader, apply_overrides
from oxbench.grid.record import RunRecord
from oxbench.grid.spec import GridError, GridFile, expand, load_grid
from oxbench_cli import app

runner = CliRunner()
BASE = {
    "model": {"name": "tiny-xs"},
    "data": {"n_train": 8, "max_new_tokens": 8},
    "train": {"batch_size": 4, "max_steps": 1, "lr": 1.0e-3},
    "eval": {"n_test": 4, "n_ood": 4, "k": 0, "max_new_tokens": 8},
}


def grid_file(tmp_path, **over) -> str:
    g = {"name": "g", "base": BASE, "axes": {"method": ["sft", "dpo"], "seed": [0]}, **over}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(g))
    return str(tmp_path / "g.yaml")


def plan(path: str, *args: str):
    return runner.invoke(app, ["run", "--grid", path, "--plan", "--out", "/nonexistent-out", *args])


def one_line_error(result, *needles):
    assert result.exit_code == 2, result.output
    err = result.output.strip()
    assert len(err.splitlines()) == 1, err
    assert all(n in err for n in needles), err


def test_the_key_rule_grid_blocks_by_name_run_settings_under_base():
    raw = {"name": "g", "base": {"train": {"lr": 1.0}}, "axes": {"seed": [0]}}
    over = [
        "train.lr=1e-5",  # a run setting: base's
        "base.train.epochs=2",  # base named: the same
        "axes.loss.beta=[0.1, 0.3]",  # an axis's name is the rest, dots and all
        "methods.dpo.loss.beta=0.2",  # a method, then its setting
        "scales.tiny-m.train.batch_size=8",
        "budget.rollouts=4096",
        "name=other",
        "track=[tensorboard, wandb]",
    ]
    out = apply_overrides(raw, over, "g.yaml")
    assert out["base"]["train"] == {"lr": 1e-5, "epochs": 2}  # 1e-5 a number, as YAML 1.2 reads it
    assert out["axes"] == {"seed": [0], "loss.beta": [0.1, 0.3]}
    # a method's or scale's setting is kept dotted, as a dotted key of the file is: set after the block's own
    assert out["methods"] == {"dpo": {"loss.beta": 0.2}}
    assert out["scales"] == {"tiny-m": {"train.batch_size": 8}}
    assert out["budget"] == {"rollouts": 4096} and out["name"] == "other"
    assert out["base"]["track"] == ["tensorboard", "wandb"] and out["base"]["cli_overrides"] == over


def test_the_later_override_wins_dotted_or_nested():
    raw = {"name": "g", "methods": {"dpo": {"loss": {"beta": 0.1}}}}
    over = ["methods.dpo.loss.beta=0.3", "methods.dpo.loss={beta: 0.5}", "axes.seed=[0]", "axes.method=[dpo]"]
    for given, beta in ((over, 0.5), ([over[1], over[0], *over[2:]], 0.3)):
        cells = expand(GridFile.model_validate(apply_overrides(copy.deepcopy(raw), given, "g")), "g")
        assert [c.loss for c in cells] == [{"beta": beta}]


def test_override_values_are_read_by_a_safe_loader():
    """Data, never code: the loader is a yaml.SafeLoader (tests/test_bad_input.py checks every load names one)."""
    assert issubclass(_OverrideSafeLoader, yaml.SafeLoader)
    with pytest.raises(GridError, match="malformed YAML value"):
        apply_overrides({}, ["train.lr=!!python/object/apply:os.system [echo]"], "g.yaml")


def test_no_run_setting_shares_a_name_with_a_grid_block():
    """What makes the rule unambiguous: a first part is a block of the grid file or a run setting."""
    assert set(BLOCKS) & set(RunConfig.model_fields) == set()


def test_an_override_enters_the_run_id_as_the_same_setting_in_the_file_does(tmp_path):
    path = grid_file(tmp_path)
    plain = {c.method: c.run_id() for c in expand(load_grid(path), path)}
    over = ["train.lr=1e-5", "methods.dpo.loss.beta=0.2"]
    cells = expand(load_grid(path, over), path)
    assert all(c.run_id() != plain[c.method] for c in cells)  # each cell's config changed
    edited = grid_file(tmp_path, base={**BASE, "train": {**BASE["train"], "lr": 1.0e-5}})
    same = expand(load_grid(edited, ["methods.dpo.loss.beta=0.2"]), edited)
    assert [c.run_id() for c in same] == [
        c.run_id() for c in cells
    ]  # the overrides themselves are not hashed
    assert [c.cli_overrides for c in cells] == [over, over]


def test_each_cell_records_its_overrides_and_an_old_record_still_reads(tmp_path):
    path = grid_file(tmp_path)
    cfg = expand(load_grid(path, ["axes.seed=[0,1,2]"]), path)[0]
    assert RunConfig(cli_overrides=["x=1"]).run_id() == RunConfig().run_id()
    ident = {"run_id": cfg.run_id(), "grid": "g", "scale": "tiny-xs", "method": "sft", "seed": 0}
    rec = RunRecord(**ident, status="running", lora=False, config=cfg.model_dump())
    assert rec.model_dump(mode="json")["config"]["cli_overrides"] == ["axes.seed=[0,1,2]"]
    old = cfg.model_dump()
    del old["cli_overrides"]  # a record written before the field: its config still validates, with none
    assert RunConfig.model_validate(old).cli_overrides == []


def test_a_plan_with_overrides(tmp_path):
    r = plan(grid_file(tmp_path), "train.lr=1e-5", "axes.seed=[0,1,2]")
    assert r.exit_code == 0, r.output
    assert "g.yaml with train.lr=1e-5 axes.seed=[0,1,2]" in r.output and "6 cells" in r.output


@pytest.mark.parametrize(
    "override,needles",
    [
        ("trian.lr=1", ("'trian'", "did you mean 'train'")),  # a run setting's typo: as in the file
        ("train.lr=-1", ("'train.lr': must be > 0",)),
        ("axes.sed=[0]", ("unknown axis 'sed'",)),
        ("axes.seed=3", ("'axes.seed'", "valid list")),
        ("report.metric=skill", ("'report.metric'",)),
        ("methods.simpo.loss.beta=0.1", ("methods.simpo matches no cell",)),
        ("seed=3", ("override 'seed=3'", "axis 'seed' sets it in every cell", "axes.seed=[...]")),
        ("train.lr", ("override 'train.lr'", "expected KEY=VALUE")),
        ("train..lr=1", ("override 'train..lr=1'", "expected KEY=VALUE")),
        ("name.x=1", ("'name' is a single value",)),
        ("train.lr=[1", ("malformed YAML value",)),
    ],
)
def test_a_bad_override_is_one_line_naming_the_file_and_the_field(tmp_path, override, needles):
    one_line_error(plan(grid_file(tmp_path), override), "g.yaml", *needles)


def test_overrides_go_with_a_grid_not_a_single_config(tmp_path):
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(BASE))
    r = runner.invoke(app, ["run", "--config", str(tmp_path / "c.yaml"), "--plan", "train.lr=1e-5"])
    one_line_error(r, "train.lr=1e-5", "--grid")


def test_version():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.strip() == f"oxbench {version('oxbench')}", r.output


def test_enumerated_options_are_typers_choices():
    """Typer lists each choice in --help and refuses any other value; the lists are the code's own."""
    from analysis.seed_planner import SPENDING
    from oxbench.grid.spec import REPORT_METRICS
    from oxbench_cli import report, run, seeds

    assert typing.get_args(run.Executor) == ("local", "ray", "slurm")
    assert typing.get_args(seeds.Spending) == SPENDING
    assert report.ReportMetric is not None and typing.get_args(report.ReportMetric) == REPORT_METRICS
    help_text = " ".join(runner.invoke(app, ["run", "--help"], terminal_width=200).output.split())
    assert "local|ray|slurm" in help_text
