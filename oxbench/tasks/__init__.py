"""Tasks: the procedural ``arith`` task (in- and out-of-distribution) and GSM8K-format files."""

from __future__ import annotations

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

    ``task`` is a dict (``TaskConfig.model_dump()``): ``{"name": "arith", "steps", "max_operand"}``,
    ``{"name": "arith_ood", ...}`` or ``{"name": "gsm8k", "path": ..., "test_path": ...}``: ``path`` is a
    directory holding ``train``/``test`` files, a Hub id, or the train file (then ``test_path`` is the
    test file). ``local_only`` validates local files and skips Hub ids (no network).
    """
    name = task["name"]
    if name in ("arith", "arith_ood"):
        variant = "ood" if name == "arith_ood" else "id"
        return arith.generate(
            split,
            n or 1000,
            seed=seed,
            steps=task.get("steps", 2),
            max_operand=task.get("max_operand", 30),
            variant=variant,
            distinct=distinct,
        )
    if name == "gsm8k":
        from pathlib import Path

        from oxbench.tasks.errors import TaskError
        from oxbench.tasks.gsm8k import _looks_like_path, load_gsm8k

        source = task.get("test_path") if split == "test" and task.get("test_path") else task["path"]
        if Path(source).is_file() and split == "test" and not task.get("test_path"):
            raise TaskError(f"task.path {source} is a single file: give task.test_path for the test split")
        if local_only and not Path(source).exists() and not _looks_like_path(source):
            return []
        return load_gsm8k(source, split=split, limit=n)
    raise ValueError(f"unknown task {name!r}")
