"""Grid files: a shared base config, axes (scale x method x seed x any key), per-method and
per-scale overrides. Expanding a grid gives one validated :class:`RunConfig` per cell.

.. code-block:: yaml

    name: quickstart
    base: {task: {name: arith}, train: {lr: 1.0e-4}}
    axes: {scale: [tiny-xs, tiny-m], method: [sft, dpo], seed: [0, 1], loss.beta: [0.1]}
    methods: {dpo: {train: {lr: 5.0e-5}}}
    scales: {tiny-m: {train: {batch_size: 4}}}

Axis names: ``scale`` (= ``model.name``), ``method``, ``seed``, ``lora`` (``on``/``off`` =
``model.lora.enabled``) or any dotted key of :class:`RunConfig` (``train.lr``,
``loss.beta``, ...). Precedence: base < per-scale < per-method < axis value.

Every cell records the axes with more than one value (other than scale, method and seed) in
``RunConfig.arm_keys``: runs that differ in one of them are different arms, never seeds of one.

A **budget** (IsoCompute) fixes every online cell's sampling compute C = B_p · n · M:

.. code-block:: yaml

    budget: {rollouts: 8192, constraints: ["B <= 256", "B_p >= 4"]}
    axes: {online.n: [2, 4, 8, 16], online.prompts_per_batch: [4, 16]}

sets ``online.rounds`` = M = rollouts // (B_p · n) in each cell and leaves out the cells whose
constraints fail. Constraints are arithmetic comparisons (parsed, never ``eval``-ed) over ``n``,
``B_p``, ``M``, ``B`` (= B_p · n), ``C`` (= B · M) and any dotted setting (``train.batch_size``).
"""

from __future__ import annotations

import ast
import copy
import difflib
import functools
import itertools
import json
import math
import operator
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from oxbench.config import RunConfig, check_dir_name, format_validation_error
from oxbench.grid.tune import TuneSpec

ALIASES = {"scale": "model.name", "lora": "model.lora.enabled"}


class GridError(ValueError):
    """A malformed grid; the message is one line naming the file and the field."""


class Budget(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rollouts: int  # C_max: every cell's B_p * n * M
    constraints: list[str] = Field(default_factory=list)  # cells where one is false are left out


# what a leaderboard can rank by: the greedy test accuracies every record holds
# (oxbench.eval.evaluate.greedy_metrics) and the OOD one
ReportMetric = Literal[
    "accuracy", "accuracy_flexible", "accuracy_verified", "accuracy_verified_flexible", "ood_accuracy"
]
REPORT_METRICS: tuple[str, ...] = get_args(ReportMetric)
REPORT_OPTIONS = "report.json"  # a grid's report options, beside its records (read by report and status)


class ReportOptions(BaseModel):
    """How a grid's report ranks its arms: by ``metric`` (strict accuracy unless the study says
    otherwise: one whose signals are flexible ranks skill with ``accuracy_verified_flexible``), each
    arm tested against ``baseline`` (a method, or an arm label)."""

    model_config = ConfigDict(extra="forbid")

    metric: ReportMetric = "accuracy"
    baseline: str = "dpo"


class ClusterOptions(BaseModel):
    """How a grid's cells are laid out and what they ask a cluster for: the defaults of ``oxbench run``'s
    ``--nproc``, ``--nnodes``, ``--zero-stage``, ``--gpus-per-rank``, ``--cpus-per-rank``, ``--partition``,
    ``--account``, ``--qos`` and ``--sbatch`` (a flag given on the command line wins; ``sbatch`` lines add)."""

    model_config = ConfigDict(extra="forbid")

    nproc: int | None = Field(None, ge=1)
    nnodes: int | None = Field(None, ge=1)
    zero_stage: Literal[0, 1, 2, 3] | None = None
    gpus_per_rank: int | None = Field(None, ge=0)
    cpus_per_rank: int | None = Field(None, ge=1)
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    sbatch: list[str] = Field(default_factory=list)


class GridFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    budget: Budget | None = None
    # bundles of settings crossed with the axes, e.g. [{loss.is_correction: none}, {loss.is_correction:
    # decoupled, online.ess_lr: sqrt}]: each bundle is one level of an arm (its keys join arm_keys)
    variants: list[dict[str, Any]] = Field(default_factory=list)
    base: dict[str, Any] = Field(default_factory=dict)
    axes: dict[str, list[Any]] = Field(default_factory=dict)
    methods: dict[str, dict[str, Any]] = Field(default_factory=dict)
    scales: dict[str, dict[str, Any]] = Field(default_factory=dict)
    report: ReportOptions = Field(default_factory=ReportOptions)
    cluster: ClusterOptions = Field(default_factory=ClusterOptions)
    # a confirmatory grid (its design pre-registered before it runs): the only kind that may evaluate on
    # the locked confirmation split (eval.split: confirm)
    confirmatory: bool = False
    # the tuning protocol (oxbench.grid.tune): each arm at its best setting on the validation split first
    tune: TuneSpec | None = None

    @field_validator("name")
    @classmethod
    def _a_directory_name(cls, name: str) -> str:
        return check_dir_name(name, "name")


def _set(d: dict, dotted: str, value) -> None:
    keys = dotted.split(".")
    for i, k in enumerate(keys[:-1]):
        d = d.setdefault(k, {})
        if not isinstance(d, dict):
            block = ".".join(keys[: i + 1])
            raise ValueError(f"override {dotted!r}: {block!r} is a single value, not a block of settings")
    d[keys[-1]] = value


def _merge(a: dict, b: dict) -> dict:
    out = copy.deepcopy(a)
    for k, v in b.items():
        if "." in k:
            _set(out, k, copy.deepcopy(v))
        elif isinstance(v, dict) and isinstance(out.get(k), dict) and k != "loss":
            out[k] = _merge(out[k], v)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = {**out[k], **v}
        else:
            out[k] = copy.deepcopy(v)
    return out


def _axis_path(name: str, where: str) -> str:
    path = ALIASES.get(name, name)
    if path in ("method", "seed"):
        return path
    head, *rest = path.split(".")
    if head == "loss" and len(rest) == 1:
        return path
    model: type[BaseModel] = RunConfig
    for i, part in enumerate(path.split(".")):
        fields = model.model_fields
        if part not in fields:
            known = list(fields) + (list(ALIASES) if i == 0 else [])
            close = difflib.get_close_matches(part, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise GridError(f"{where}: unknown axis {name!r}{hint}")
        ann = fields[part].annotation
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
        if model is None and i < len(path.split(".")) - 1:
            raise GridError(f"{where}: unknown axis {name!r}")
    return path


def _coerce(path: str, value):
    if path == "model.lora.enabled" and isinstance(value, str):
        if value.lower() not in ("on", "off", "true", "false"):
            raise ValueError(f"lora must be on/off, got {value!r}")
        return value.lower() in ("on", "true")
    return value


class _UniqueKeyLoader(yaml.SafeLoader):
    """The safe loader, except that a key given twice in one mapping is an error, not last-wins."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read_yaml(path: Path, what: str):
    """Parse a YAML (or JSON) file; a missing file, a directory, bytes that are not UTF-8, a syntax
    error or a duplicate key is one line naming the file."""
    if not path.exists():
        raise GridError(f"{path}: {what} not found")
    if not path.is_file():
        raise GridError(f"{path}: {what} is a directory, not a file")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GridError(
            f"{path}: {what} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})"
        ) from None
    except OSError as exc:
        raise GridError(f"{path}: cannot read the {what}: {exc.strerror}") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())  # one line, whatever YAML says
        raise GridError(f"{path}: malformed YAML{at}: {problem}") from None


def load_report_options(directory: str | Path) -> ReportOptions | None:
    """The report options a grid run left beside its records (``report.json``); None when it left none.
    Malformed options are a one-line :class:`GridError` naming the file (and the field)."""
    path = Path(directory) / REPORT_OPTIONS
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GridError(f"{path}: not valid UTF-8 JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise GridError(f"{path}: must be a mapping of report options (metric, baseline)")
    try:
        return ReportOptions(**raw)
    except ValidationError as exc:
        raise GridError(format_validation_error(exc, str(path), ReportOptions)) from None


def load_grid(path: str | Path, overrides: Sequence[str] = ()) -> GridFile:
    """The grid file at ``path``, with the command line's ``key=value`` ``overrides`` applied to it before
    it is validated (:mod:`oxbench.grid.overrides`)."""
    path = Path(path)
    raw = _read_yaml(path, "grid file")
    if not isinstance(raw, dict):
        raise GridError(f"{path}: a grid must be a mapping with name/base/axes")
    if overrides:
        from oxbench.grid.overrides import apply_overrides  # (it builds on this module)

        raw = apply_overrides(raw, overrides, str(path))
    try:
        return GridFile.model_validate(raw)
    except ValidationError as exc:
        raise GridError(format_validation_error(exc, str(path), GridFile)) from None


def _expanded(grid: GridFile, where: str):
    """Every cell with the values it was built from, and the builder (a cell from such values)."""
    paths, checks, arm_keys, variants = _layout(grid, where)
    build = functools.partial(_cell, grid, arm_keys=arm_keys, checks=checks, where=where)
    names = list(grid.axes)
    pairs = []
    for bundle, combo in itertools.product(variants, itertools.product(*(grid.axes[n] for n in names))):
        values = {**bundle, **{paths[n]: v for n, v in zip(names, combo)}}
        cfg = build(values)
        if cfg is not None:
            pairs.append((values, cfg))
    return pairs, build


def expand(grid: GridFile, where: str = "grid") -> list[RunConfig]:
    """Every cell of the grid as a validated RunConfig (axis order = file order)."""
    pairs, build = _expanded(grid, where)
    cells = [cfg for _, cfg in pairs]
    if not cells:
        raise GridError(f"{where}: budget.constraints leave no cell")
    _check_overrides_match(grid, cells, where)
    if grid.tune is not None:
        _tuning(grid, pairs, build, where)  # its checks and every tuning cell, validated before anything runs
    ids = [c.run_id() for c in cells]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise GridError(f"{where}: two cells resolve to the same config ({dup}); an axis has repeated values")
    return cells


class TunePlan(NamedTuple):
    """A tuned grid's cells, the builder and its arms' tuning cells (:func:`oxbench.grid.tune.plan`),
    built and validated once."""

    pairs: list
    build: Any
    arms: list


def tune_plan(grid: GridFile, where: str = "grid") -> TunePlan:
    """The tuning plan of a grid with ``tune:``, checked and validated (a GridError naming the field)."""
    pairs, build = _expanded(grid, where)
    return TunePlan(pairs, build, _tuning(grid, pairs, build, where))


def tuning_cells(grid: GridFile, where: str = "grid", tp: TunePlan | None = None) -> list[RunConfig]:
    """The tuning cells of a grid with ``tune:`` (:func:`oxbench.grid.tune.tuning_cells`), validated."""
    from oxbench.grid import tune

    return tune.tuning_cells((tp or tune_plan(grid, where)).arms)


def tuned_cells(
    grid: GridFile, out: Path, where: str = "grid", tp: TunePlan | None = None
) -> tuple[list[RunConfig], dict, list[RunConfig]]:
    """The grid's cells at their arm's pick, where its tune has ended, and what the tune says per arm
    (:func:`oxbench.grid.tune.final_cells`, from the tuning records under ``out``)."""
    from oxbench.grid import tune

    tp = tp or tune_plan(grid, where)
    try:
        return tune.final_cells(grid.tune, tp.arms, tp.pairs, out, tp.build)
    except ValueError as exc:
        raise GridError(f"{where}: {exc}") from None


def _tuning(grid: GridFile, pairs, build, where: str) -> list:
    from oxbench.grid import tune

    try:
        tune.check(grid.tune, [cfg for _, cfg in pairs])
        return tune.plan(grid.tune, grid.name, pairs, build)
    except GridError:
        raise
    except ValueError as exc:
        raise GridError(f"{where}: {exc}") from None


def grid_size(grid: GridFile) -> int:
    """How many cells the grid names before any budget constraint leaves some out (no cell is built)."""
    return math.prod(len(v) for v in grid.axes.values()) * max(1, len(grid.variants))


def representatives(grid: GridFile, where: str = "grid") -> list[RunConfig]:
    """A few validated cells that together take every value of every axis and every variant, the other
    axes at their first values: what ``--plan`` checks of a grid too large to build whole
    (:func:`grid_size`). Every cell is checked in full before it runs."""
    paths, checks, arm_keys, variants = _layout(grid, where)
    for name, values in grid.axes.items():
        if len({json.dumps(v, sort_keys=True, default=str) for v in values}) != len(values):
            raise GridError(f"{where}: axis {name!r} has repeated values")
    first = {paths[n]: v[0] for n, v in grid.axes.items()}
    picks = [first] + [{**first, paths[n]: v} for n, vs in grid.axes.items() for v in vs[1:]]
    cells = (
        _cell(grid, {**bundle, **values}, arm_keys, checks, where) for bundle in variants for values in picks
    )
    return [c for c in cells if c is not None]


def _layout(grid: GridFile, where: str) -> tuple[dict[str, str], list, list[str], list[dict]]:
    """What every cell of the grid is built from, checked: each axis's dotted path (no axis empty, every
    method registered), the budget's constraints, the axes that tell one arm from another (scale,
    method and LoRA are always in an arm), and the variant bundles (``[{}]`` without any)."""
    paths = {name: _axis_path(name, where) for name in grid.axes}
    for name, values in grid.axes.items():
        if not values:
            raise GridError(f"{where}: axis {name!r} has no values")
    _check_methods(grid, where)
    checks = (
        [Constraint(t, f"{where}: budget.constraints") for t in grid.budget.constraints]
        if grid.budget
        else []
    )
    arm_keys = [
        paths[n]
        for n in grid.axes
        if paths[n] not in ("seed", "method", "model.name") and len(grid.axes[n]) > 1
    ]
    variants = [{_axis_path(k, where): v for k, v in bundle.items()} for bundle in grid.variants] or [{}]
    if len(variants) > 1:
        arm_keys += sorted({k for bundle in variants for k in bundle} - set(arm_keys))
    return paths, checks, arm_keys, variants


def _check_methods(grid: GridFile, where: str) -> None:
    """Every method the grid names is registered (else the closest registered name)."""
    import losses

    known = set(losses.names())
    methods = grid.axes.get("method", [grid.base.get("method", "sft")])
    for m in list(methods) + list(grid.methods):
        if not isinstance(m, str):  # a block or a number where a method's name goes (found by the fuzz pass)
            raise GridError(f"{where}: method: must be a method's name, got {m!r}"[:300])
        if m not in known:
            close = difflib.get_close_matches(str(m), sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise GridError(f"{where}: unknown method {m!r}{hint}")


def _cell(grid: GridFile, values: dict, arm_keys: list[str], checks: list, where: str) -> RunConfig | None:
    """One cell: the base, its scale's and method's overrides, then the axis ``values``; validated.
    None when a budget constraint leaves it out."""
    model = grid.base.get("model", {})
    if not isinstance(model, dict):  # found by the fuzz pass: `model:` with nothing after it
        raise GridError(f"{where}: base.model: must be a block of settings (name: ...), got {model!r}"[:300])
    scale = values.get("model.name", model.get("name"))
    method = values.get("method", grid.base.get("method", "sft"))
    try:
        raw = _merge(
            _merge({"grid": grid.name, **grid.base}, grid.scales.get(scale, {})), grid.methods.get(method, {})
        )
        for p, v in values.items():
            _set(raw, p, _coerce(p, v))
    except (TypeError, ValueError) as exc:
        raise GridError(f"{where}: {exc}") from None
    raw["arm_keys"] = list(arm_keys)
    cell = f"{where} (cell {method}/{scale or 'tiny-xs'})"  # no model named: the default model
    over = _apply_budget(raw, grid.budget, cell) if grid.budget else None
    try:
        cfg = RunConfig.model_validate(raw)
    except ValidationError as exc:
        raise GridError(format_validation_error(exc, cell)) from None
    if not all(c.holds(cfg) for c in checks):
        return None
    if over:
        raise GridError(over)
    if cfg.eval.split == "confirm" and (not grid.confirmatory or not _has_confirm_split(cfg.task.name)):
        why = LOCKED if not grid.confirmatory else f"task {cfg.task.name} has no locked confirmation split"
        raise GridError(f"{cell}: field 'eval.split': {why}")
    validate_cell(cfg, cell)
    return cfg


def _check_overrides_match(grid: GridFile, cells: list[RunConfig], where: str) -> None:
    """A per-method or per-scale override that no cell uses is a typo or a stale block: an error."""
    for section, used in (("methods", {c.method for c in cells}), ("scales", {c.model.name for c in cells})):
        for key in getattr(grid, section):
            if key not in used:
                close = difflib.get_close_matches(str(key), sorted(used), n=1)
                hint = (
                    f"; did you mean {close[0]!r}?"
                    if close
                    else f" (the cells have: {', '.join(sorted(used))})"
                )
                raise GridError(f"{where}: {section}.{key} matches no cell{hint}")


def _apply_budget(raw: dict, budget: Budget, where: str) -> str | None:
    """Set ``online.rounds`` so the cell spends ``budget.rollouts``. A budget below one batch sets one
    round and returns the error, raised unless a constraint leaves the cell out."""
    from oxbench.config import OnlineConfig

    online = raw.setdefault("online", {})
    if "rounds" in online or "steps" in online:
        raise GridError(f"{where}: field 'online.rounds' is set by budget.rollouts; remove it")
    defaults = OnlineConfig()
    batch = online.get("prompts_per_batch", defaults.prompts_per_batch) * online.get("n", defaults.n)
    online["rounds"] = max(1, budget.rollouts // batch)
    if budget.rollouts < batch:
        return (
            f"{where}: field 'budget.rollouts': {budget.rollouts} is smaller than one batch "
            f"(online.prompts_per_batch x n = {batch})"
        )
    return None


_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
_SHORT = {"n": "online.n", "B_p": "online.prompts_per_batch", "M": "online.rounds"}


class Constraint:
    """A budget constraint such as ``B_p * n <= 512``: parsed with :mod:`ast` into numbers, names,
    arithmetic, comparisons and ``and``/``or``/``not``; anything else (calls, attributes of objects,
    subscripts) is a :class:`GridError` naming the expression."""

    def __init__(self, text: str, where: str):
        self.text, self.where = text, where
        try:
            self.tree = ast.parse(text, mode="eval").body
        except SyntaxError:
            raise GridError(f"{where}: cannot parse constraint {text!r}") from None
        self._check(self.tree)

    def _check(self, node) -> None:
        allowed = (
            ast.BinOp,
            ast.UnaryOp,
            ast.Compare,
            ast.BoolOp,
            ast.Name,
            ast.Constant,
            ast.Attribute,
            ast.And,
            ast.Or,
            ast.Not,
            ast.Load,
            *_OPS,
        )
        for sub in ast.walk(node):
            if not isinstance(sub, allowed) or (
                isinstance(sub, ast.Constant) and not isinstance(sub.value, int | float)
            ):
                raise GridError(
                    f"{self.where}: constraint {self.text!r} may use only numbers, names and arithmetic"
                )
            if isinstance(sub, ast.Name | ast.Attribute) and self._path(sub) is None:
                raise GridError(f"{self.where}: constraint {self.text!r}: unknown name {ast.unparse(sub)!r}")

    @staticmethod
    def _path(node) -> str | None:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.insert(0, node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        name = ".".join([node.id, *parts])
        if name in ("B", "C") or name in _SHORT:
            return name
        return name if _lookup_path(RunConfig().model_dump(), _SHORT.get(name, name)) is not None else None

    def holds(self, cfg: RunConfig) -> bool:
        o = cfg.online
        names = {"B": o.prompts_per_batch * o.n, "C": o.rollouts()}
        dump = cfg.model_dump()

        def value(node):
            if isinstance(node, ast.Constant):
                return node.value
            if isinstance(node, ast.Name | ast.Attribute):
                path = self._path(node)
                return names[path] if path in names else _lookup_path(dump, _SHORT.get(path, path))
            if isinstance(node, ast.UnaryOp):
                return (
                    (not value(node.operand))
                    if isinstance(node.op, ast.Not)
                    else _OPS[type(node.op)](value(node.operand))
                )
            if isinstance(node, ast.BinOp):
                return _OPS[type(node.op)](value(node.left), value(node.right))
            if isinstance(node, ast.BoolOp):
                vals = [value(v) for v in node.values]
                return all(vals) if isinstance(node.op, ast.And) else any(vals)
            left = value(node.left)  # a Compare chain
            for op, right in zip(node.ops, node.comparators):
                right = value(right)
                if not _OPS[type(op)](left, right):
                    return False
                left = right
            return True

        return bool(value(self.tree))


def _lookup_path(tree: dict, path: str):
    for part in path.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return None
        tree = tree[part]
    return tree


def validate_cell(cfg: RunConfig, where: str) -> None:
    """Checks that need no training: the loss and its hyper-parameters, the model name, the data file."""
    import losses
    from oxbench.engine.plan import resolve
    from oxbench.models.tiny import ModelError, check_model_name
    from oxbench.tasks.errors import TaskError

    try:
        plan = resolve(cfg, live=False)  # the loss, its hyper-parameters, (online) the micro-batches
        spec = plan.spec
        if plan.caps.online:
            if cfg.online.source == "delayed" and spec.pairs_from_iterate:
                raise ValueError(
                    f"online.source 'delayed' cannot serve {cfg.method}: its iterate is frozen for a whole iteration"
                )
            explicit = cfg.online.model_fields_set  # a default the method cannot take falls back, recorded
            if cfg.online.backend != "hf" and cfg.model.lora.enabled and "backend" in explicit:
                raise ValueError(
                    f"online.backend '{cfg.online.backend}' samples plain weights, not a LoRA model"
                )
            if cfg.online.share_prompt and not plan.caps.shared_prompt and "share_prompt" in explicit:
                raise ValueError(
                    f"field 'online.share_prompt': {cfg.method} does not train on rollouts' completions "
                    "alone (a value head, or pairs)"
                )
        check_model_name(cfg.model.name)
        _check_reward_models(cfg, where)
        if cfg.eval.lm_eval.tasks:
            _check_lm_eval_tasks(cfg)
        if cfg.task.name == "gsm8k":
            task = cfg.task
            _check_gsm8k(
                json.dumps(task.model_dump(), sort_keys=True), _file_state(task.path, task.test_path)
            )
        elif cfg.task.name == "arith":
            _check_arith_sizes(cfg.task.n_ops, cfg.task.max_operand, cfg.data.n_train, cfg.eval.n_test)
        else:  # a plugin task: its train and test splits load, once per task and data file state
            task = cfg.task
            _check_task(json.dumps(task.model_dump(), sort_keys=True), _file_state(task.path, task.test_path))
        if cfg.data.path is not None:
            kind = "online" if plan.caps.online else plan.caps.data
            columns = _check_data_file(cfg.data.path, _file_state(cfg.data.path), kind)
            if plan.caps.online:
                _check_online_file(cfg, spec, columns)
    except (losses.LossError, ModelError, TaskError) as exc:
        raise GridError(f"{where}: {exc}") from None
    except ValueError as exc:  # online micro-batches, or knobs allowing too few distinct problems
        field = next(
            (f for f in ("train.batch_size", "online.backend", "online.source") if f in str(exc)), "task"
        )
        if str(exc).startswith("field '"):
            raise GridError(f"{where}: {exc}") from None
        raise GridError(f"{where}: field '{field}': {exc}") from None


def _check_reward_models(cfg: RunConfig, where: str) -> None:
    """Each reward model of ``online.rewards``: a local checkpoint or a Hub id, as the policy's model."""
    from oxbench.models.tiny import ModelError, check_model_name, is_tiny

    for term in cfg.online.rewards or []:
        if term.model is None:
            continue
        try:
            if is_tiny(term.model):
                raise ModelError(
                    f"model {term.model!r} must be a checkpoint (a path or Hub id), not a tiny rung"
                )
            check_model_name(term.model)
        except ModelError as exc:
            raise GridError(f"{where}: field 'online.rewards' ({term.name}): reward {exc}") from None


def _check_lm_eval_tasks(cfg: RunConfig) -> None:
    """The lm-eval tasks exist (the config checked the bundled ones' names) and fit the task. Only a task
    oxbench does not bundle needs lm-eval's own index (``datasets`` and ``lm_eval``, seconds to import)."""
    from oxbench.tasks.lm_eval_tasks import bundled

    tasks = cfg.eval.lm_eval.tasks
    if not all(t in bundled() for t in tasks):
        from oxbench.eval.lm_eval_path import check_tasks

        try:
            check_tasks(tuple(tasks))
        except ValueError as exc:
            raise ValueError(f"field 'eval.lm_eval.tasks': {exc}") from None
    if "oxbench_arith_hard" in tasks and cfg.task.name != "arith":
        raise ValueError("field 'eval.lm_eval.tasks': oxbench_arith_hard builds on task 'arith'")


def _file_state(*paths: str | None) -> tuple:
    """What changes when the data at ``paths`` does (each file's, or a directory's files', size and mtime)."""
    files = []
    for path in filter(None, paths):
        p = Path(path).expanduser()
        files += sorted(p.iterdir()) if p.is_dir() else [p]
    return tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.is_file())


@functools.lru_cache(maxsize=16)
def _check_gsm8k(task: str, state: tuple) -> None:
    """Both splits of a GSM8K task read and checked, once per task and file state (a grid's cells share
    one file: 96 cells read GSM8K 192 times, 15 s, before this)."""
    from oxbench.tasks import load_task_split

    for split in ("train", "test"):
        load_task_split(json.loads(task), split, local_only=True)


@functools.lru_cache(maxsize=16)
def _check_data_file(path: str, state: tuple, kind: str) -> tuple[str, ...]:
    """``data.path`` read and checked to make ``kind`` examples, once per file state and kind: its columns."""
    from oxbench.data import formats
    from oxbench.tasks.errors import TaskError

    try:
        return formats.check(path, kind).columns
    except TaskError as exc:
        raise type(exc)(f"field 'data.path': {exc}") from None


def _check_online_file(cfg: RunConfig, spec, columns: tuple[str, ...]) -> None:
    """An online method on a data file's prompts: rewarded by ``online.rewards`` (the file has no task
    answers for ``online.reward_grader``), a grader's reward only against an ``answer`` column, no
    difficulty subset (measured on the task's problems), no gold answers for the chosen side."""
    path = cfg.data.path
    if cfg.online.rewards is None:
        raise ValueError(
            f"field 'online.rewards': {cfg.method} on the prompts of data.path {path} needs reward "
            "functions for them: name them in online.rewards (docs/rewards.md)"
        )
    from oxbench.tasks.registry import GRADER_REWARDS

    graders = [t.name for t in cfg.online.rewards if t.name in GRADER_REWARDS]
    if graders and "answer" not in columns:
        raise ValueError(
            f"field 'online.rewards': reward {graders[0]!r} grades against an 'answer' column, which "
            f"{path} has not (its columns: {', '.join(columns)})"
        )
    if cfg.data.subset is not None:
        raise ValueError(
            f"field 'data.subset': it picks the task's problems by difficulty; {cfg.method} samples the "
            f"prompts of data.path {path}"
        )
    if spec.generates_own_pairs and spec.chosen_source == "gold":
        raise ValueError(
            f"field 'data.path': {cfg.method}'s chosen answers are the task's gold answers; the prompts "
            f"of {path} have none"
        )


@functools.lru_cache(maxsize=16)
def _check_task(task: str, state: tuple) -> None:
    """A plugin task's train and test rows loaded and checked (:func:`oxbench.tasks.registry.load_rows`)."""
    from oxbench.tasks import load_task_split
    from oxbench.tasks.errors import TaskError

    for split in ("train", "test"):
        if not load_task_split(json.loads(task), split, n=1):
            raise TaskError(f"task {json.loads(task)['name']!r}: its {split!r} split has no rows")


def _has_confirm_split(task: str) -> bool:
    from oxbench.tasks import get_task

    return "confirm" in get_task(task).splits


@functools.lru_cache(maxsize=64)
def _check_arith_sizes(n_ops: int, max_operand: int, n_train: int | None, n_test: int | None) -> None:
    from oxbench.tasks import arith

    arith.generate("train", n_train, n_ops=n_ops, max_operand=max_operand)
    arith.generate("test", n_test, n_ops=n_ops, max_operand=max_operand)


LOCKED = (
    "'confirm' is the locked confirmation split: only a grid marked 'confirmatory: true' (its design "
    "pre-registered) may evaluate on it"
)


def load_run_config(path: str | Path) -> RunConfig:
    """A single-cell YAML or JSON file (a RunConfig); never confirmatory (a grid is)."""
    path = Path(path)
    raw = _read_yaml(path, "config file")
    if not isinstance(raw, dict) or not raw:
        raise GridError(
            f"{path}: a run config must be a non-empty mapping of sections (method, model, train, ...)"
        )
    try:
        cfg = RunConfig.model_validate(raw)
    except ValidationError as exc:
        raise GridError(format_validation_error(exc, str(path))) from None
    if cfg.eval.split == "confirm":
        raise GridError(f"{path}: field 'eval.split': {LOCKED}")
    validate_cell(cfg, str(path))
    return cfg
