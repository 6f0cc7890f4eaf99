"""``oxbench losses new NAME``: a new loss as an installable plugin package, in the house style (and
``oxbench tasks new NAME``: a new task, :func:`new_task`).

It writes ``DIR/oxbench-NAME/`` with

* ``oxbench_NAME/__init__.py``: a pure loss function of log-probs with its docstring (paper, equation,
  shapes, deviations), its :class:`losses.LossSpec` and nothing else. It starts as the pairwise logistic
  (DPO-form) loss, so it runs and passes ``oxbench losses check`` at once; replace the maths with yours;
* ``tests/test_NAME.py``: a hand-computed value with its algebra in the docstring, and the contract
  (:mod:`oxbench.losscheck`);
* ``pyproject.toml``: the ``oxbench.losses`` entry point, so ``pip install -e`` registers the loss.
"""

from __future__ import annotations

from pathlib import Path
from string import Template

MODULE = Template('''r"""${title}: <one line on what the loss does>.

Paper: <arXiv id>, Eq. <n>. Replace the maths below with the paper's; keep this docstring's parts.

.. math::

    \\mathcal{L} = -\\log\\sigma\\Big(\\beta\\big[(\\log\\pi_\\theta(y_w|x) - \\log\\pi_{ref}(y_w|x))
                 - (\\log\\pi_\\theta(y_l|x) - \\log\\pi_{ref}(y_l|x))\\big]\\Big)

Inputs: ``chosen_logps``, ``rejected_logps``, ``ref_chosen_logps``, ``ref_rejected_logps`` (B,): summed
response log-probs of the policy and the frozen reference. Reduction: mean over pairs.
Metrics: ``${name}/margin``, the mean of the β-scaled log-ratio margin (detached).
Deviations from the authors' code: none yet (say here what differs, and why).
"""

from __future__ import annotations

import torch.nn.functional as F

from losses import LossInputs, LossOutput, LossSpec


def ${name}_loss(inputs: LossInputs, *, beta: float = 0.1) -> LossOutput:
    inputs.require("${name}", "chosen_logps", "rejected_logps", "ref_chosen_logps", "ref_rejected_logps")
    margin = beta * ((inputs.chosen_logps - inputs.ref_chosen_logps) - (inputs.rejected_logps - inputs.ref_rejected_logps))
    loss = -F.logsigmoid(margin).mean()
    return LossOutput(loss, {"${name}/margin": margin.detach().mean()})


spec = LossSpec(
    name="${name}",
    fn=${name}_loss,
    paradigm="offline",
    data="pairs",
    needs_reference=True,
    defaults={"beta": 0.1},
    paper="<arXiv id> Eq. <n>",
    version=1,  # bump whenever the maths changes: it is part of every run_id
    description="${title}: <one line>",
)
''')

TEST = Template('''"""${title}: a value computed by hand, and the contract every loss keeps."""

import math

import torch

from losses import LossInputs
from oxbench.losscheck import check
from oxbench_${name} import spec


def test_hand_computed_value():
    """β = 0.5; policy log-probs (chosen, rejected) = (-1, -3), reference (-2, -2):
    margin = β·[(-1 - (-2)) - (-3 - (-2))] = 0.5·(1 + 1) = 1, so the loss is
    -log σ(1) = log(1 + e^-1) = 0.3132617."""
    inputs = LossInputs(
        chosen_logps=torch.tensor([-1.0]), rejected_logps=torch.tensor([-3.0]),
        ref_chosen_logps=torch.tensor([-2.0]), ref_rejected_logps=torch.tensor([-2.0]),
    )
    out = spec.fn(inputs, beta=0.5)
    assert math.isclose(out.loss.item(), math.log1p(math.exp(-1.0)), rel_tol=1e-6)
    assert math.isclose(float(out.metrics["${name}/margin"]), 1.0, rel_tol=1e-6)


def test_the_contract():
    assert check(spec) == []
''')

PYPROJECT = Template("""[project]
name = "oxbench-${name}"
version = "0.1.0"
description = "${title} for oxbench"
requires-python = ">=3.10"
dependencies = ["oxbench"]

[project.entry-points."oxbench.losses"]
${name} = "oxbench_${name}:spec"

[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[tool.setuptools]
packages = ["oxbench_${name}"]
""")


def new_loss(name: str, directory: Path) -> Path:
    """Write the package for loss ``name`` under ``directory``; its path. Refuses to overwrite."""
    import losses

    if not name.isidentifier() or not name.islower():
        raise ValueError(f"loss name {name!r} must be a lower-case Python identifier (e.g. my_dpo)")
    if name in losses.names():
        raise ValueError(f"loss name {name!r} is taken by a registered loss (oxbench losses lists them)")
    root = Path(directory) / f"oxbench-{name.replace('_', '-')}"
    if root.exists():
        raise ValueError(f"{root} already exists")
    words = {"name": name, "title": name.replace("_", " ").upper()}
    (root / f"oxbench_{name}").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / f"oxbench_{name}" / "__init__.py").write_text(MODULE.substitute(words))
    (root / "tests" / f"test_{name}.py").write_text(TEST.substitute(words))
    (root / "pyproject.toml").write_text(PYPROJECT.substitute(words))
    return root


# ------------------------------------------------------------------------ oxbench tasks new NAME

TASK_MODULE = Template('''"""${title}: spell a word backwards. A task plugin for oxbench: replace the data, the graders and the
rewards with your own, keep the shapes (``oxbench tasks check ${name}`` says what a task must keep).

* ``load``: the rows of one split, ``{"question", "answer", "id"}``: words of 3 to ``max_len`` letters
  (``task.options.max_len``, 5 by default), each word's split decided by a hash of it, so no seed can put
  a test word into training;
* the graders (``completion, answer -> bool``): ``strict`` (``accuracy``): the first line is the answer;
  ``flexible`` (``accuracy_flexible``): the answer anywhere;
* the reward functions (TRL's ``reward_funcs`` shape: completions in, floats out), for
  ``online.rewards``: ``letters``, the share of the answer's letters in place on the first line;
* the evaluation metrics beside accuracy and pass@k: ``letters_in_place``;
* a difficulty bin beside IsoCompute's, for ``data.subset``: ``sometimes`` (the base right in 10-90%).
"""

from __future__ import annotations

import hashlib
import random
import string

from oxbench.tasks import TaskSpec
from oxbench.text.formatting import PromptFormat

SPLITS = ("train", "test", "validation")
POOL = 2000  # rows of a split when the run asks for all of them


def split_of(word: str) -> str:
    """One word in five is a test word, one in five a validation word, by a hash of the word."""
    digest = int(hashlib.sha256(word.encode()).hexdigest()[:8], 16) % 5
    return "test" if digest == 0 else "validation" if digest == 1 else "train"


def load(split: str, *, n: int | None = None, seed: int = 0, task: dict | None = None) -> list[dict]:
    """The first ``n`` rows of ``split`` (None: :data:`POOL` of them), the same for the same arguments."""
    longest = int(((task or {}).get("options") or {}).get("max_len", 5))
    rng = random.Random(f"${name}/{split}/{seed}/{longest}")
    want, rows, seen = POOL if n is None else n, [], set()
    for _ in range(100 * want + 1000):
        if len(rows) == want:
            break
        word = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, longest)))
        if word in seen or split_of(word) != split:
            continue
        seen.add(word)
        question, answer = f"Spell {word} backwards.", word[::-1]
        rows.append({"question": question, "answer": answer, "id": f"${name}-{split}-{len(rows)}"})
    return rows


def first_line(completion: str) -> str:
    return (completion.strip().splitlines() or [""])[0].strip()


def exact(completion: str, answer: str) -> bool:
    """strict: the completion's first line is the answer."""
    return first_line(completion) == answer


def anywhere(completion: str, answer: str) -> bool:
    """flexible: the answer is somewhere in the completion."""
    return answer in completion


def letters(completions: list[str], answer: list[str], **columns) -> list[float]:
    """The share of the answer's letters in their place on the first line (partial credit)."""
    return [sum(x == y for x, y in zip(first_line(c), a)) / len(a) for c, a in zip(completions, answer)]


def metrics(rows: list[dict], completions: list[str]) -> dict[str, float]:
    """Evaluation metrics of the greedy completions of the test rows, beside accuracy."""
    scores = letters(completions, [r["answer"] for r in rows])
    return {"letters_in_place": sum(scores) / max(1, len(scores))}


spec = TaskSpec(
    name="${name}",
    load=load,
    graders={"strict": exact, "flexible": anywhere},
    splits=SPLITS,
    prompt=PromptFormat(
        instruction="Answer with the word spelled backwards, alone on one line.",
        plain="Question: {question}\\nAnswer: ",
    ),
    rewards={"letters": letters},
    metrics=metrics,
    bins={"sometimes": (0.1, 0.9)},
    description="${title}: <one line on the task>",
)
''')

TASK_TEST = Template('''"""${title}: the graders on hand-made cases, and the contract every task keeps."""

from oxbench.tasks.check import check

from oxbench_${name} import anywhere, exact, letters, load, spec


def test_the_graders_on_hand_made_cases():
    assert exact("olleh", "olleh") and exact(" olleh\\nand more", "olleh")
    assert not exact("hello", "olleh") and not exact("", "olleh")
    assert anywhere("it is olleh.", "olleh") and not anywhere("hello", "olleh")
    assert letters(["olxxh", ""], ["olleh", "olleh"]) == [0.6, 0.0]


def test_the_splits_are_disjoint_and_fixed():
    train = {r["question"] for r in load("train", n=300)}
    assert not train & {r["question"] for r in load("test", n=300)}
    assert load("test", n=5) == load("test", n=5)


def test_the_contract():
    assert check(spec) == []
''')

TASK_PYPROJECT = Template("""[project]
name = "oxbench-${dist}"
version = "0.1.0"
description = "${title}: a task for oxbench"
requires-python = ">=3.10"
dependencies = ["oxbench"]

[project.entry-points."oxbench.tasks"]
${name} = "oxbench_${name}:spec"

[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[tool.setuptools]
packages = ["oxbench_${name}"]
""")


def new_task(name: str, directory: Path) -> Path:
    """Write the package for task ``name`` under ``directory``; its path. Refuses to overwrite."""
    from oxbench.tasks import task_names

    if not name.isidentifier() or not name.islower():
        raise ValueError(f"task name {name!r} must be a lower-case Python identifier (e.g. my_task)")
    if name in task_names():
        raise ValueError(f"task name {name!r} is taken by a registered task (oxbench tasks lists them)")
    root = Path(directory) / f"oxbench-{name.replace('_', '-')}"
    if root.exists():
        raise ValueError(f"{root} already exists")
    words = {"name": name, "title": name.replace("_", " ").capitalize(), "dist": name.replace("_", "-")}
    (root / f"oxbench_{name}").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / f"oxbench_{name}" / "__init__.py").write_text(TASK_MODULE.substitute(words))
    (root / "tests" / f"test_{name}.py").write_text(TASK_TEST.substitute(words))
    (root / "pyproject.toml").write_text(TASK_PYPROJECT.substitute(words))
    return root
