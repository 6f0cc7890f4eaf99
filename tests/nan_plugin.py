"""A deliberately broken loss for the failure-handling tests: it returns NaN."""

import torch

from losses import LossInputs, LossOutput
from losses._families import sft_spec


def nan_loss(inputs: LossInputs) -> LossOutput:
    return LossOutput(inputs.logps.sum() * torch.tensor(float("nan")))


spec = sft_spec("nan_loss", nan_loss, paper="none", description="returns NaN (tests only)")
