r"""CPO: Contrastive Preference Optimization (Xu et al., 2024).

Paper: arXiv:2401.08417, Eq. 3 (preference term) and the final objective below it.

.. math::

    \mathcal{L}_{CPO} = \underbrace{-\mathbb{E}\big[\log\sigma\big(\beta\log\pi_\theta(y_w|x)
                        - \beta\log\pi_\theta(y_l|x)\big)\big]}_{\mathcal{L}_{prefer}}
                        \;+\;\alpha\,\mathcal{L}_{NLL},
    \qquad
    \mathcal{L}_{NLL} = -\frac{\sum_b \sum_t \log\pi_\theta(y_{w,t}^{(b)}\mid x^{(b)}, y_{w,<t}^{(b)})}
                              {\sum_b |y_w^{(b)}|}

DPO with a uniform reference (so no reference model) plus a behaviour-cloning NLL on the chosen
response. With ``label_smoothing`` ε > 0 the preference term is ``-(1-ε) logσ(z) - ε logσ(-z)``
(TRL's ``loss_type="sigmoid"``).

``nll_reduction`` (default ``"mean"``): ``L_NLL`` as the authors' released trainer computes it (the
CPOTrainer they contributed to TRL; TRL 1.16 ``CPOTrainer``, ``CrossEntropyLoss`` over the chosen
response tokens of the batch): the token mean over every chosen token of the batch, as above.
``"sum"`` is the paper's ``L_NLL = -E[log π_θ(y_w|x)]`` read literally: the summed log-prob of
each chosen response, averaged over pairs; it equals the mean × (chosen tokens in the batch) / B,
i.e. about the mean chosen length times more weight at the same α. Version 1 used ``"sum"``
(on the batch of ``tests/loss_algorithms/test_trl_parity_reffree.py``: 33.30 against TRL's 7.61);
version 2 defaults to ``"mean"``, which matches TRL exactly (7.61).

Inputs: ``chosen_logps``, ``rejected_logps`` (B,) summed over response tokens, and
``chosen_mask`` (B, T) for the token count of the ``"mean"`` NLL. Reduction: mean over pairs
(preference term), token mean over the batch (NLL). Metrics: rewards ``β·logπ`` (detached),
accuracy, margin; ``prefer_loss`` and ``nll``.
Defaults: β = 0.1 and α = 1 (the paper's objective is ``L_prefer + L_NLL``; TRL's defaults);
TRL names ``beta``, ``cpo_alpha``. The reference study (oxRL) also uses the token mean.
"""

from __future__ import annotations

from losses._common import reward_metrics
from losses._families import ref_free_pairs_spec
from losses.registry import loss_name
from losses.simpo import sigmoid_margin_loss
from losses.types import LossInputs, LossOutput, Tensor

NAME = loss_name(__name__)

NLL_REDUCTIONS = ("mean", "sum")


def chosen_nll(inputs: LossInputs, nll_reduction: str, loss: str) -> Tensor:
    """NLL of the chosen responses: token mean over the batch (``"mean"``) or mean of the sums (``"sum"``)."""
    if nll_reduction == "mean":
        inputs.require(loss, "chosen_mask")
        return -inputs.chosen_logps.sum() / inputs.chosen_mask.sum().clamp(min=1.0)
    if nll_reduction == "sum":
        return -inputs.chosen_logps.mean()
    raise ValueError(
        f"loss {loss!r}: nll_reduction {nll_reduction!r} is not one of {', '.join(NLL_REDUCTIONS)}"
    )


def cpo_loss(
    inputs: LossInputs,
    *,
    beta: float = 0.1,
    cpo_alpha: float = 1.0,
    label_smoothing: float = 0.0,
    nll_reduction: str = "mean",
) -> LossOutput:
    inputs.require(NAME, "chosen_logps", "rejected_logps")
    chosen, rejected = inputs.chosen_logps, inputs.rejected_logps
    prefer = sigmoid_margin_loss(beta * (chosen - rejected), label_smoothing).mean()
    nll = chosen_nll(inputs, nll_reduction, NAME)
    metrics = reward_metrics(beta * chosen, beta * rejected)
    metrics.update({"prefer_loss": prefer.detach(), "nll": nll.detach()})
    return LossOutput(prefer + cpo_alpha * nll, metrics)


spec = ref_free_pairs_spec(
    NAME,
    cpo_loss,
    paper="arXiv:2401.08417 Eq. 3 + L_NLL",
    version=2,
    description="CPO: reference-free DPO on summed log-probs plus an NLL (behaviour cloning) term on the chosen.",
)
