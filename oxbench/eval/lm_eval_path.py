"""Evaluate an in-memory model with EleutherAI's lm-evaluation-harness.

``evaluate_with_lm_eval(model, tokenizer, tasks)`` wraps the model, as it is in memory
(no save/reload), in ``lm_eval.models.huggingface.HFLM``, builds a
``lm_eval.tasks.TaskManager`` over oxbench's bundled task YAMLs (``oxbench/tasks/lm_eval_tasks/``) plus
an optional ``task_dir`` of the caller's, runs ``lm_eval.simple_evaluate`` and returns
``{task: {"metric,filter": value}}``, lm-eval's own keys, e.g.
``{"oxbench_gsm8k_local": {"exact_match,strict-match": 0.41, "exact_match,flexible-extract": 0.44, ...}}``.

Bundled task ``oxbench_gsm8k_local``: lm-eval's ``gsm8k`` (same prompt
``"Question: {{question}}\\nAnswer:"``, same exact_match metric, same ``strict-match`` /
``flexible-extract`` filters), zero-shot, greedy, stopping at ``"\\n\\n"`` or ``"Question:"``,
over a local GSM8K-format file read with :func:`oxbench.tasks.gsm8k.load_gsm8k` through the
YAML's ``custom_dataset`` hook (:func:`load_local_gsm8k`). The file is the first of:
``data_file=``, the ``OXBENCH_GSM8K_FILE`` environment variable, ``<repo>/../shared/data/gsm8k/test.jsonl``.
The ``data_file`` reaches the hook as TaskManager metadata (lm-eval passes a task's metadata
to ``custom_dataset`` as keyword arguments), so the bundled YAML is never rewritten.

lm-eval's built-in task index (about 15 000 YAMLs, ~15 s to scan) is only built when a
requested task is not among the bundled or ``task_dir`` ones.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import datasets

from oxbench.tasks.errors import TaskFileNotFoundError
from oxbench.tasks.gsm8k import default_gsm8k_dir, load_gsm8k
from oxbench.tasks.lm_eval_tasks import DIR as BUNDLED_DIR

TASKS_DIR = BUNDLED_DIR
GSM8K_FILE_ENV = "OXBENCH_GSM8K_FILE"
DEFAULT_GSM8K_FILE = default_gsm8k_dir() / "test.jsonl"


def resolve_gsm8k_file(data_file: str | os.PathLike | None = None) -> Path:
    """The local GSM8K file: ``data_file``, else ``$OXBENCH_GSM8K_FILE``, else the shared test split."""
    chosen = data_file or os.environ.get(GSM8K_FILE_ENV) or DEFAULT_GSM8K_FILE
    path = Path(chosen).expanduser()
    if not path.exists():
        origin = (
            "data_file"
            if data_file
            else (f"${GSM8K_FILE_ENV}" if os.environ.get(GSM8K_FILE_ENV) else "default")
        )
        raise TaskFileNotFoundError(
            f"GSM8K data not found: {path} ({origin}); pass data_file= or set {GSM8K_FILE_ENV}"
        )
    return path


def load_local_gsm8k(gsm8k_file: str | None = None, **_task_metadata: Any) -> dict[str, datasets.Dataset]:
    """``custom_dataset`` hook of ``oxbench_gsm8k_local.yaml``: ``{"test": Dataset}`` of the local file.

    lm-eval calls it with the task's metadata (``version``, ... and, from
    :func:`build_task_manager`, ``gsm8k_file``) as keyword arguments; only ``gsm8k_file`` is read.
    """
    rows = load_gsm8k(str(resolve_gsm8k_file(gsm8k_file)), split="test")
    return {"test": datasets.Dataset.from_list(rows)}


def load_general(family: str, n_test: int = 500, **_task_metadata: Any) -> dict[str, datasets.Dataset]:
    """``custom_dataset`` hook of ``oxbench_{order,next,reverse}.yaml`` (``family`` from ``dataset_kwargs``):
    ``{"test": Dataset}`` of that family's test split (``next``'s is all 181 of its test items)."""
    from oxbench.tasks.general import generate

    rows = generate(family, "test", None if family == "next" else n_test, seed=0)
    return {"test": datasets.Dataset.from_list(rows)}


def load_arith_hard(
    arith_n_ops: int = 2, arith_max_operand: int = 40, n_test: int = 500, **_task_metadata: Any
) -> dict[str, datasets.Dataset]:
    """``custom_dataset`` hook of ``oxbench_arith_hard.yaml``: the run's arith task with
    :data:`oxbench.tasks.HARD_EXTRA_OPS` more operations (its knobs from the TaskManager metadata)."""
    from oxbench.tasks import hard_task, load_task_split

    task = hard_task({"name": "arith", "n_ops": arith_n_ops, "max_operand": arith_max_operand})
    rows = load_task_split(task, "test", n=n_test, seed=0)
    return {"test": datasets.Dataset.from_list(rows)}


def build_task_manager(
    tasks: Sequence[str],
    task_dir: str | os.PathLike | None = None,
    data_file: str | os.PathLike | None = None,
    metadata: dict | None = None,
):
    """A TaskManager over the bundled YAMLs and ``task_dir``; lm-eval's own only if ``tasks`` needs them.
    ``metadata`` reaches every task's ``custom_dataset`` hook (e.g. ``arith_n_ops``)."""
    from lm_eval.tasks import TaskManager

    include = [str(TASKS_DIR)] + ([str(Path(task_dir).expanduser())] if task_dir else [])
    metadata = {
        **(metadata or {}),
        **({"gsm8k_file": str(resolve_gsm8k_file(data_file))} if data_file else {}),
    }
    metadata = metadata or None
    manager = TaskManager(include_path=include, include_defaults=False, metadata=metadata)
    if all(task in manager.all_tasks for task in tasks):
        return manager
    return TaskManager(include_path=include, include_defaults=True, metadata=metadata)


def run_lm_eval(
    model,
    tokenizer,
    tasks: Sequence[str],
    *,
    task_dir: str | os.PathLike | None = None,
    data_file: str | os.PathLike | None = None,
    limit: int | float | None = None,
    batch_size: int = 8,
    max_gen_toks: int = 256,
    log_samples: bool = False,
    metadata: dict | None = None,
) -> dict | None:
    """lm-eval's raw ``simple_evaluate`` output for the in-memory ``model`` (``None`` off rank 0).

    ``max_gen_toks`` overrides every task's generation length. ``log_samples=True`` keeps
    per-document records under ``"samples"`` (``resps``, ``filtered_resps``, ``exact_match``).
    The model's train/eval mode is restored afterwards (HFLM switches it to eval).
    """
    import lm_eval
    from lm_eval.models.huggingface import HFLM

    manager = build_task_manager(tasks, task_dir, data_file, metadata)
    was_training = model.training
    try:
        lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, device=str(model.device))
        return lm_eval.simple_evaluate(
            model=lm,
            tasks=list(tasks),
            task_manager=manager,
            limit=limit,
            gen_kwargs={"max_gen_toks": max_gen_toks},
            log_samples=log_samples,
        )
    finally:
        model.train(was_training)


def summarize_results(results: dict | None) -> dict[str, dict[str, float]]:
    """``{task: {"metric,filter": value}}`` from lm-eval's output: numeric entries only (no alias, no N/A)."""
    if results is None:
        return {}
    return {
        task: {
            key: float(value)
            for key, value in metrics.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)
        }
        for task, metrics in results["results"].items()
    }


def evaluate_with_lm_eval(model, tokenizer, tasks: list[str], **options) -> dict[str, dict[str, float]]:
    """Scores of ``model`` on lm-eval ``tasks``: ``{task: {"metric,filter": value}}`` (see module doc).
    ``options``: :func:`run_lm_eval`'s (``task_dir``, ``data_file``, ``limit``, ``batch_size``,
    ``max_gen_toks``, ...)."""
    return summarize_results(run_lm_eval(model, tokenizer, tasks, **options))


#: a task's headline number: the first of these lm-eval keys it reports (strict match before flexible,
#: plain accuracy before length-normalised)
PRIMARY_METRICS = (
    "exact_match,strict-match",
    "acc,none",
    "exact_match,none",
    "acc_norm,none",
    "exact_match,flexible-extract",
)


#: kept beside a strict-match headline: the last number taken, whatever the format
FLEXIBLE = "exact_match,flexible-extract"


def _hook_metadata(task: dict) -> dict | None:
    """The run's task knobs that the bundled hooks read (``oxbench_arith_hard`` builds on ``arith``)."""
    if task["name"] != "arith":
        return None
    return {"arith_n_ops": task["n_ops"], "arith_max_operand": task["max_operand"]}


def task_chance(name: str, task: dict, n: int) -> float | None:
    """The accuracy of guessing on lm-eval task ``name``: a bundled YAML's ``chance``, the training answers'
    distribution for ``oxbench_arith_hard`` (as for the run's own task), ``None`` for lm-eval's own tasks."""
    from oxbench.tasks import chance_accuracy, hard_task, load_task_split
    from oxbench.tasks.lm_eval_tasks import bundled

    if name == "oxbench_arith_hard" and task["name"] == "arith":
        hard = hard_task(task)
        return chance_accuracy(hard, load_task_split(hard, "test", n=n, seed=0))
    return bundled().get(name)


def lm_eval_metrics(model, tokenizer, cfg) -> dict[str, float | None]:
    """``eval.lm_eval``'s tasks on ``model``, as flat run metrics: ``lmeval_<task>`` (the task's headline
    number, :data:`PRIMARY_METRICS`), ``lmeval_<task>_chance`` and ``lmeval_<task>_n`` (documents scored),
    and ``lmeval_<task>_flexible`` beside a strict-match headline (so format and answer can be told apart).
    The families each task belongs to stay in the config (``eval.lm_eval.tasks``). ``{}`` if none."""
    le, task = cfg.eval.lm_eval, cfg.task.model_dump()
    if not le.tasks:
        return {}
    raw = run_lm_eval(
        model,
        tokenizer,
        list(le.tasks),
        limit=le.limit,
        batch_size=le.batch_size,
        max_gen_toks=le.max_gen_toks,
        metadata=_hook_metadata(task),
    )
    scores, out = summarize_results(raw), {}
    for name in le.tasks:
        metric = next((m for m in PRIMARY_METRICS if m in scores.get(name, {})), None)
        if metric is None:
            raise ValueError(f"eval.lm_eval.tasks: {name!r} reported none of {', '.join(PRIMARY_METRICS)}")
        n = _documents(raw, name)
        out |= {
            f"lmeval_{name}": scores[name][metric],
            f"lmeval_{name}_chance": task_chance(name, task, n),
            f"lmeval_{name}_n": n,
        }
        if metric == "exact_match,strict-match" and FLEXIBLE in scores[name]:  # format apart from the answer
            out[f"lmeval_{name}_flexible"] = scores[name][FLEXIBLE]
    return out


def _documents(raw: dict, name: str) -> int:
    """Documents lm-eval scored for ``name``: its own count, or its subtasks' for a group (``mmlu``)."""
    if name in raw["n-samples"]:
        return int(raw["n-samples"][name]["effective"])
    return sum(_documents(raw, sub) for sub in raw.get("group_subtasks", {}).get(name, []))


def known_tasks() -> set[str]:
    """Every task name the bundled YAMLs and lm-eval's own define. Building lm-eval's index reads its
    ~14,000 YAMLs (~14 s), so the names are kept in the cache, keyed by lm-eval's version and install
    and by the bundled YAMLs."""
    from importlib.metadata import distribution

    from oxbench.utils import cache_root, content_hash, write_json_atomic

    dist = distribution("lm_eval")
    bundled = sorted(
        (f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in Path(TASKS_DIR).rglob("*.yaml")
    )
    key = content_hash({"lm_eval": dist.version, "at": str(dist.locate_file("")), "bundled": bundled})
    path = cache_root() / "lm_eval_index" / f"{key}.json"
    try:
        return set(json.loads(path.read_text()))
    except (OSError, ValueError):
        pass
    known = set(build_task_manager(["(every task)"]).all_tasks)  # a name not bundled: lm-eval's own too
    write_json_atomic(path, sorted(known))
    return known


@functools.lru_cache(maxsize=16)
def check_tasks(tasks: tuple[str, ...]) -> None:
    """``ValueError`` naming the first of ``tasks`` that neither oxbench bundles nor lm-eval knows (the
    index of lm-eval's own tasks, ~15 s, is only read when a task is not bundled)."""
    import difflib

    from oxbench.tasks.lm_eval_tasks import bundled, check_bundled

    check_bundled(list(tasks))
    if all(t in bundled() for t in tasks):
        return
    known = known_tasks()
    for t in tasks:
        if t not in known:
            close = difflib.get_close_matches(t, known, n=1)
            raise ValueError(
                f"unknown lm-eval task {t!r}" + (f"; did you mean {close[0]!r}?" if close else "")
            )
