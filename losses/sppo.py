r"""SPPO: self-play preference optimisation, hard-label form (Wu et al., 2024).

Paper: arXiv:2405.00675, Eq. 4.7 (Algorithm 1) with hard win probabilities; TRL ``loss_type="sppo_hard"``.

.. math::

    \mathcal{L}_{SPPO} = \Big(\log\tfrac{\pi_\theta(y_w|x)}{\pi_{ref}(y_w|x)} - \tfrac{1}{2\beta}\Big)^2
                       + \Big(\log\tfrac{\pi_\theta(y_l|x)}{\pi_{ref}(y_l|x)} + \tfrac{1}{2\beta}\Big)^2

The paper regresses each response's log-ratio onto ``η(P̂(y ≻ π_t) − 1/2)``, with P̂ a win
probability estimated by a preference model (PairRM) and ``π_t`` the previous iterate. The hard
version sets P̂ = 1 for the chosen and 0 for the rejected response and writes ``η = 1/β``; the
reference model plays the role of ``π_t`` (one iteration). Chosen and rejected are pushed to fixed
targets ``±1/(2β)`` independently, so the chosen likelihood rises and the rejected one falls.

Inputs: ``chosen_logps``, ``rejected_logps``, ``ref_chosen_logps``, ``ref_rejected_logps`` (B,),
summed over response tokens. Reduction: mean over pairs. Metrics: implicit rewards ``β·log(π/π_ref)``.

Defaults: β = 1e-3 (η = 1/β = 1000), the authors' released pipeline (uclaml/SPPO
``scripts/pipeline.sh``, ``BETA="0.001"``, which overrides the ``beta: 0.01`` of
``recipes/uclaml-sppo/config_full.yaml``; the trainer's comment: "In SPPO, beta=1/eta ... is usually
chosen around 1e-3"). Version 2; version 1 used TRL's generic β = 0.1. The targets ±1/(2β) are then
±500 nats: no short answer reaches them, so the loss keeps raising the chosen and lowering the
rejected log-ratio, as in the authors' runs.

Deviation from the authors' code (uclaml/SPPO ``sppo/trainer.py``, ``loss_type="sppo"`` with P̂ = 1/0):
it averages the two squares, ``(loss_w + loss_l)/2``; we keep TRL's ``sppo_hard`` sum (TRL parity
is tested), which has the same minimiser and twice the gradient.
"""

from __future__ import annotations

from losses._common import checked_logratios, pair_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def sppo_loss(inputs: LossInputs, *, beta: float = 0.001) -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME)
    target = 1.0 / (2.0 * beta)
    losses = (chosen - target) ** 2 + (rejected + target) ** 2
    return pair_output(losses, beta * chosen, beta * rejected)


spec = pairs_spec(
    NAME,
    sppo_loss,
    paper="arXiv:2405.00675 Eq. 4.7 (hard labels P=1/0)",
    version=2,
    description="Self-play preference optimisation (hard labels): regress log-ratios onto +1/(2β) and -1/(2β).",
)
