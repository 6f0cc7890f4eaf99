r"""CPO: Contrastive Preference Optimization (Xu et al., 2024).

Paper: arXiv:2401.08417, Eq. 3 (preference term) and the final objective below it.

.. math::

    \mathcal{L}_{CPO} = \underbrace{-\mathbb{E}\big[\log\sigma\big(\beta\log\pi_\theta(y_w|x)
                        - \beta\log\pi_\theta(y_l|x)\big)\big]}_{\mathcal{L}_{prefer}}
                        \;\underbrace{-\;\alpha\,\mathbb{E}\big[\log\pi_\theta(y_w|x)\big]}_{\alpha\,\mathcal{L}_{NLL}}

DPO with a uniform reference (so no reference model) plus a behaviour-cloning NLL on the chosen
response. With ``label_smoothing`` ε > 0 the preference term is ``-(1-ε) logσ(z) - ε logσ(-z)``
(TRL's ``loss_type="sigmoid"``).

Inputs: ``chosen_logps``, ``rejected_logps`` (B,) summed over response tokens. Reduction: mean
over pairs for both terms. Metrics: rewards ``β·logπ`` (detached), accuracy, margin;
``prefer_loss`` and ``nll``.
Defaults: β = 0.1 and α = 1 (the paper's objective is ``L_prefer + L_NLL``); TRL names ``beta``,
``cpo_alpha``.

Deviation from TRL 1.16 and the reference study (oxRL), deliberate: both reduce the NLL as a
token-level mean (``CrossEntropyLoss`` over every chosen response token of the batch). The
paper's ``L_NLL = -E[log π_θ(y_w|x)]`` is the sequence log-likelihood, the same ``log π_θ(y|x)``
as in ``L_prefer``, so we use the summed log-prob of each chosen response, averaged over pairs.
The two differ by the factor (chosen tokens in the batch) / B, i.e. our NLL weighs about the
mean chosen length times more at the same α; the authors' released trainer (the one in TRL) used
the token mean, so ``cpo_alpha ≈ 1 / mean length`` recovers its balance. The preference term is
identical to TRL's.
"""

from __future__ import annotations

from losses._common import reward_metrics
from losses.registry import LossSpec
from losses.simpo import sigmoid_margin_loss
from losses.types import LossInputs, LossOutput


def cpo_loss(
    inputs: LossInputs, *, beta: float, cpo_alpha: float, label_smoothing: float = 0.0
) -> LossOutput:
    inputs.require("cpo", "chosen_logps", "rejected_logps")
    chosen, rejected = inputs.chosen_logps, inputs.rejected_logps
    prefer = sigmoid_margin_loss(beta * (chosen - rejected), label_smoothing).mean()
    nll = -chosen.mean()
    metrics = reward_metrics(beta * chosen, beta * rejected)
    metrics.update({"prefer_loss": prefer.detach(), "nll": nll.detach()})
    return LossOutput(prefer + cpo_alpha * nll, metrics)


spec = LossSpec(
    name="cpo",
    fn=cpo_loss,
    paradigm="offline_ref_free",
    data="pairs",
    needs_reference=False,
    defaults={"beta": 0.1, "cpo_alpha": 1.0, "label_smoothing": 0.0},
    paper="arXiv:2401.08417 Eq. 3 + L_NLL",
    version=1,
    description="CPO: reference-free DPO on summed log-probs plus an NLL (behaviour cloning) term on the chosen.",
)
