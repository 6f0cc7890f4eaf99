"""Evaluate an in-memory model with EleutherAI's lm-evaluation-harness.

``evaluate_with_lm_eval(model, tokenizer, tasks)`` wraps the model, as it is in memory
(no save/reload), in ``lm_eval.models.huggingface.HFLM``, builds a
``lm_eval.tasks.TaskManager`` over oxbench's bundled task YAMLs (``lm_eval_tasks/``) plus
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

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import datasets

from oxbench.tasks.errors import TaskFileNotFoundError
from oxbench.tasks.gsm8k import default_gsm8k_dir, load_gsm8k

TASKS_DIR = Path(__file__).resolve().parent / "lm_eval_tasks"
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


def build_task_manager(
    tasks: Sequence[str],
    task_dir: str | os.PathLike | None = None,
    data_file: str | os.PathLike | None = None,
):
    """A TaskManager over the bundled YAMLs and ``task_dir``; lm-eval's own only if ``tasks`` needs them."""
    from lm_eval.tasks import TaskManager

    include = [str(TASKS_DIR)] + ([str(Path(task_dir).expanduser())] if task_dir else [])
    metadata = {"gsm8k_file": str(resolve_gsm8k_file(data_file))} if data_file else None
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
) -> dict | None:
    """lm-eval's raw ``simple_evaluate`` output for the in-memory ``model`` (``None`` off rank 0).

    ``max_gen_toks`` overrides every task's generation length. ``log_samples=True`` keeps
    per-document records under ``"samples"`` (``resps``, ``filtered_resps``, ``exact_match``).
    The model's train/eval mode is restored afterwards (HFLM switches it to eval).
    """
    import lm_eval
    from lm_eval.models.huggingface import HFLM

    manager = build_task_manager(tasks, task_dir, data_file)
    was_training = model.training
    try:
        lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size)
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


def evaluate_with_lm_eval(
    model,
    tokenizer,
    tasks: list[str],
    *,
    task_dir: str | os.PathLike | None = None,
    data_file: str | os.PathLike | None = None,
    limit: int | float | None = None,
    batch_size: int = 8,
    max_gen_toks: int = 256,
) -> dict[str, dict[str, float]]:
    """Scores of ``model`` on lm-eval ``tasks``: ``{task: {"metric,filter": value}}`` (see module doc)."""
    results = run_lm_eval(
        model,
        tokenizer,
        tasks,
        task_dir=task_dir,
        data_file=data_file,
        limit=limit,
        batch_size=batch_size,
        max_gen_toks=max_gen_toks,
    )
    return summarize_results(results)
