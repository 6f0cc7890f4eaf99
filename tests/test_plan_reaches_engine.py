"""The plan reaches the engine (issue 39, item 1): ``RunPlan`` answers what a method needs (online or
offline, its reference, a value head, the shared-prompt forward, its data kind, self-sampled pairs) once,
in ``oxbench/engine/plan.py``, and no other engine file asks the loss spec those questions again; the
micro-batch layout is worked out once, by the plan."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "oxbench" / "engine"
# the spec's capability flags: what Capabilities.of reads (oxbench/engine/plan.py)
FLAGS = {"trains_online", "needs_reference", "needs_value_model", "needs_full_logits", "updates_reference",
         "generates_own_pairs", "pairs_from_iterate", "uses_reference", "sft_source", "data"}  # fmt: skip


def _reads(path: Path, root: Path = ROOT) -> list[str]:
    """``path:line spec.FLAG`` for each read of a capability flag from something named ``spec``."""
    hits = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr in FLAGS:
            owner = node.value
            name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", None)
            if name == "spec":
                hits.append(f"{path.relative_to(root)}:{node.lineno} spec.{node.attr}")
    return hits


def test_no_engine_file_asks_the_spec_what_the_plan_answered():
    hits = [h for p in sorted(ENGINE.rglob("*.py")) if p.name != "plan.py" for h in _reads(p)]
    assert not hits, "\n".join(hits)


def test_the_check_sees_a_read_it_must_refuse(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f(self, spec):\n    return self.spec.needs_value_model or spec.data\n")
    assert sorted(h.split(" ")[1] for h in _reads(bad, tmp_path)) == ["spec.data", "spec.needs_value_model"]


def test_the_micro_batch_layout_is_worked_out_once():
    calls = []
    for path in sorted((ROOT / "oxbench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", "")) == "micro_batches_per_rank"
            ):
                calls.append(str(path.relative_to(ROOT)))
    assert calls == ["oxbench/engine/plan.py"], calls
