"""Tasks: the procedural ``arith`` task (in- and out-of-distribution) and GSM8K-format files."""

from __future__ import annotations

from oxbench.tasks import arith


def load_task_split(task: dict, split: str, *, n: int | None = None, seed: int = 0,
                    distinct: bool = True) -> list[dict]:
    """Rows ``{"question", "answer", "id"}`` of one split of the task described by ``task``.

    ``task`` is a dict (``TaskConfig.model_dump()``): ``{"name": "arith", "steps", "max_operand"}``,
    ``{"name": "arith_ood", ...}`` or ``{"name": "gsm8k", "path": ...}``.
    """
    name = task["name"]
    if name in ("arith", "arith_ood"):
        variant = "ood" if name == "arith_ood" else "id"
        return arith.generate(split, n or 1000, seed=seed, steps=task.get("steps", 2),
                              max_operand=task.get("max_operand", 30), variant=variant, distinct=distinct)
    if name == "gsm8k":
        from oxbench.tasks.gsm8k import load_gsm8k

        return load_gsm8k(task["path"], split=split, limit=n)
    raise ValueError(f"unknown task {name!r}")
