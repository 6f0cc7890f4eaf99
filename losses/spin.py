r"""SPIN: Self-Play fIne-tuNing (Chen et al., 2024).

Paper: arXiv:2401.01335, §4 (the SPIN loss with the logistic loss ℓ(t) = log(1 + e^{−t})).

.. math::

    \mathcal{L}_{SPIN}(\theta; \theta_t) = \mathbb{E}\Big[\ell\Big(
        \lambda \log\tfrac{p_\theta(y|x)}{p_{\theta_t}(y|x)} - \lambda \log\tfrac{p_\theta(y'|x)}{p_{\theta_t}(y'|x)}\Big)\Big],
    \qquad y \sim \text{gold (SFT data)},\ \ y' \sim p_{\theta_t}(\cdot|x)

The main player is the new policy ``p_θ``; the opponent is the previous iterate ``p_{θ_t}``,
which both generated the rejected answers ``y'`` and is the reference. So the loss is DPO's
(``λ`` = ``beta``) with ``chosen`` = the gold answer (``chosen_source="gold"``) and ``rejected`` =
an answer sampled from the iterate.

The iterations (``pairs_from_iterate=True``), as in the paper's Algorithm 1: the trainer freezes
the iterate ``θ_t``; every rejected answer of the iteration is sampled from it (the rollout worker
holds ``θ_t`` for the whole iteration, so each round's pairs come from the same frozen weights as if
they had all been generated up front, without sampling prompts the budget never reaches); the
reference is ``θ_t``; after ``online.pair_refresh_every`` passes over the prompts (the paper trains
2 epochs per iteration) the trained policy becomes ``θ_{t+1}``, both sampler and reference.
``online.rounds`` rounds in all, so ``rounds / (passes per iteration)`` iterations.

Version 2: version 1 sampled the rejected answers from the *current* policy every round and
refreshed the reference once per pass (or never, at the oxrl_paper settings), which is online
DPO against a lagging reference, not SPIN. Its ``ref_model_sync_steps`` and
``ref_model_mixup_alpha`` knobs are gone: the iteration length is ``online.pair_refresh_every``
and the new iterate is always a hard copy.

Deviation: with ``online.n`` samples per prompt, the rejected answer is the first *wrong* one when
there is one (a correct sample in gold format would be the gold answer itself, a pair with no
signal); the paper samples one answer per prompt (set ``online.n: 1`` for exactly that).
``β = 0.1`` (the paper's setting).
Inputs and metrics as ``dpo``. Reduction: mean over pairs. TRL has no SPIN trainer.
"""

from __future__ import annotations

from losses._common import PAIR_FIELDS
from losses._families import self_play_pairs_spec
from losses.dpo import dpo_loss
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def spin_loss(inputs: LossInputs, *, beta: float = 0.1) -> LossOutput:
    """SPIN's logistic loss against the iterate (the reference)."""
    inputs.require(NAME, *PAIR_FIELDS)
    return dpo_loss(inputs, beta=beta)


spec = self_play_pairs_spec(
    NAME,
    spin_loss,
    updates_reference=True,
    pairs_from_iterate=True,
    chosen_source="gold",
    paper="arXiv:2401.01335 §4 (SPIN loss, logistic ℓ) and Algorithm 1 (iterations)",
    version=2,
    description="SPIN: DPO of gold answers over the previous iteration's own samples, reference = previous iteration.",
)
