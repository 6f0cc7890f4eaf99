"""``oxbench losses new NAME``: a new loss as an installable plugin package, in the house style.

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
