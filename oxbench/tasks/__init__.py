"""Tasks: the procedural ``arith`` task (in- and out-of-distribution, and its harder variant), GSM8K-format
files, and the general-domain families of :mod:`oxbench.tasks.general`."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from oxbench.tasks import arith


def load_task_split(
    task: dict,
    split: str,
    *,
    n: int | None = None,
    seed: int = 0,
    distinct: bool = True,
    local_only: bool = False,
) -> list[dict]:
    """Rows ``{"question", "answer", "id"}`` of one split of the task described by ``task``.

    ``task`` is a dict (``TaskConfig.model_dump()``): ``{"name": "arith", "n_ops", "max_operand"}``,
    ``{"name": "arith_ood", ...}`` or ``{"name": "gsm8k", "path": ..., "test_path": ...}``: ``path`` is a
    directory holding ``train``/``test`` files, a Hub id, or the train file (then ``test_path`` is the
    test file). ``local_only`` validates local files and skips Hub ids (no network).
    """
    name = task["name"]
    if name in ("arith", "arith_ood"):
        variant = "ood" if name == "arith_ood" else "id"
        return arith.generate(
            split,
            n,
            seed=seed,
            n_ops=task.get("n_ops", 2),
            max_operand=task.get("max_operand", 30),
            variant=variant,
            distinct=distinct,
        )
    if name == "gsm8k":
        from pathlib import Path

        from oxbench.tasks.errors import TaskError
        from oxbench.tasks.gsm8k import _looks_like_path, load_gsm8k

        if split == "confirm":
            raise TaskError(
                "eval.split: gsm8k has no locked confirmation split (its test file is public); hold back "
                "problems of your own as task.test_path of a confirmatory grid"
            )
        if split == "validation":  # the last n problems of the train file (online prompts exclude them)
            rows = load_task_split(task, "train", local_only=local_only)
            return [{**r, "id": f"validation-{r['id']}"} for r in rows[len(rows) - min(n or 0, len(rows)) :]]
        source = task.get("test_path") if split == "test" and task.get("test_path") else task["path"]
        if Path(source).is_file() and split == "test" and not task.get("test_path"):
            raise TaskError(f"task.path {source} is a single file: give task.test_path for the test split")
        if local_only and not Path(source).exists() and not _looks_like_path(source):
            return []
        return load_gsm8k(source, split=split, limit=n)
    raise ValueError(f"unknown task {name!r}")


def data_files(task: dict) -> dict[str, Path]:
    """The local files a task's rows come from, by split (``train``, ``test``): what a record
    fingerprints. None for generated tasks (arith) and Hub ids."""
    from oxbench.tasks.gsm8k import split_file

    if task["name"] != "gsm8k" or not task.get("path"):
        return {}
    out = {}
    for split in ("train", "test"):
        source = task.get("test_path") if split == "test" and task.get("test_path") else task["path"]
        path = split_file(Path(source), split)
        if path is not None:
            out[split] = path
    return out


HARD_EXTRA_OPS = 2  # the harder in-domain task (the MATH analogue): this many more operations per problem


def hard_task(task: dict) -> dict:
    """The harder in-domain variant of an ``arith`` task: the same template, :data:`HARD_EXTRA_OPS` more
    operations (longer working, larger answers)."""
    if task["name"] != "arith":
        raise ValueError(f"the harder in-domain task is built from 'arith', not {task['name']!r}")
    return {**task, "n_ops": task.get("n_ops", 2) + HARD_EXTRA_OPS}


def verify_working(task: dict, completion: str, answer: str) -> bool | None:
    """Whether every line of a completion's working is right, for tasks whose working can be
    checked (``arith``); ``None`` for the others (GSM8K's prose cannot be)."""
    if task["name"] in ("arith", "arith_ood"):
        return arith.working_is_correct(completion, answer)
    return None


def chance_accuracy(task: dict, test_rows: list[dict], *, n_train: int = 5000) -> float:
    """The accuracy of guessing: each test answer drawn from the training answers' distribution,
    ``sum_a p_train(a) * p_test(a)`` (``n_train`` training rows, or the whole file if smaller)."""
    from oxbench.tasks.grading import reference_answer

    train = load_task_split(task, "train", n=n_train, seed=0, distinct=False)  # draws, with repetition
    counts = Counter(reference_answer(r["answer"]) for r in train)
    total = sum(counts.values())
    hits = sum(counts[reference_answer(r["answer"])] / total for r in test_rows)
    return hits / max(1, len(test_rows))
