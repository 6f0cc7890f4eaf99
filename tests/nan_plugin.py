"""A deliberately broken loss for the failure-handling tests: it returns NaN."""

import torch

from losses import LossInputs, LossOutput, LossSpec


def nan_loss(inputs: LossInputs) -> LossOutput:
    return LossOutput(inputs.logps.sum() * torch.tensor(float("nan")))


spec = LossSpec(
    name="nan_loss",
    fn=nan_loss,
    paradigm="sft",
    data="sft",
    needs_reference=False,
    paper="none",
    description="returns NaN (tests only)",
)
