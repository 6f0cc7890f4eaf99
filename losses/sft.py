r"""SFT: supervised fine-tuning on gold answers (maximum likelihood).

Paper: the standard causal-LM objective (e.g. Radford et al., 2018; as the SFT stage of
InstructGPT, arXiv:2203.02155 Sec. 3.5).

.. math::

    \mathcal{L}_{SFT} = -\frac{1}{\sum_{i,t} m_{i,t}} \sum_{i,t} m_{i,t}\,\log\pi_\theta(y_{i,t}\mid x_i, y_{i,<t})

Inputs: ``token_logps`` (B, T), zero where masked, and ``mask`` (B, T), 1 on response tokens.
Reduction: a token-level mean over every response token of the batch (each token weighs the
same, long answers weigh more), which is what ``torch.nn.CrossEntropyLoss`` computes with
``ignore_index`` on the prompt and padding, and what TRL's ``SFTTrainer`` computes.
Metrics: ``nll`` (the loss) and ``tokens`` (response tokens in the batch).

Deviation from the reference study (oxRL): its SFT sums the per-token NLL over the batch
(optionally dividing by the padded length ``B·(T-1)``, padding included). The sum makes the loss
scale with batch size and length, so the learning rate means something different per batch;
the token mean does not.
"""

from __future__ import annotations

from losses._common import masked_mean
from losses._families import sft_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput, Tensor

NAME = loss_name(__name__)


def token_mean_nll(token_logps: Tensor, mask: Tensor) -> Tensor:
    """``-Σ m·logp / Σ m`` over every response token of the batch (scalar)."""
    return -masked_mean(token_logps, mask, dim=None)


def nll_output(inputs: LossInputs) -> LossOutput:
    """The SFT :class:`LossOutput` for already-checked ``token_logps`` and ``mask``."""
    nll = token_mean_nll(inputs.token_logps, inputs.mask)
    return LossOutput(nll, {"nll": nll.detach(), "tokens": inputs.mask.sum()})


def sft_loss(inputs: LossInputs) -> LossOutput:
    inputs.require(NAME, "token_logps", "mask")
    return nll_output(inputs)


spec = sft_spec(
    NAME,
    sft_loss,
    paper="arXiv:2203.02155 Sec. 3.5 (SFT: causal-LM maximum likelihood)",
    version=1,
    sft_source="gold",
    description="Supervised fine-tuning: token-mean negative log-likelihood of the gold answers.",
)
