"""A reward model as a reward function (``online.rewards: [{name: rm, model: PATH}]``), as TRL's
``GRPOTrainer`` takes one in ``reward_funcs``: a sequence-classification checkpoint with one label,
loaded by ``AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)``, scores each
prompt + completion, and its logit is the reward.

As TRL (``GRPOTrainer._calculate_rewards``, trl 0.21): a standard prompt's text is the prompt followed by
the completion; a conversational one's, the tokenizer's chat template over the prompt's messages and the
completion's; the texts are tokenized padded on the right, without special tokens, and scored under
``torch.inference_mode``; the tokenizer's pad token is its EOS token where it has none, and the model's
``pad_token_id`` is the tokenizer's (a sequence classifier reads the last token before the padding).

The model sits on the rank's device (:mod:`oxbench.device`) in the run's ``model.dtype``; it is frozen
and never trained. Its reward is the float32 value of the logit. The prompt is what
:func:`oxbench.tasks.rewards.trl_columns` gives every reward function: the problem's question (a data
file's prompt as the file has it), not the chat-formatted prompt the policy saw."""

from __future__ import annotations

import torch

import oxbench.device as placement
from oxbench.models.tiny import ModelError


class RewardModel:
    """A sequence-classification checkpoint as a reward function in TRL's shape."""

    def __init__(self, path: str, *, dtype: str = "fp32", batch_size: int = 16):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        try:
            self.tok = AutoTokenizer.from_pretrained(path, padding_side="right")
            self.model = AutoModelForSequenceClassification.from_pretrained(
                path, num_labels=1, dtype=torch.bfloat16 if dtype == "bf16" else torch.float32
            )
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot load reward model {path!r}: {str(exc).splitlines()[0]}") from exc
        if self.tok.pad_token is None:
            self.tok.pad_token = self.tok.eos_token
        self.model.config.pad_token_id = self.tok.pad_token_id
        self.model = placement.place(self.model).eval().requires_grad_(False)
        self.path, self.batch_size = path, batch_size

    def texts(self, prompts: list, completions: list) -> list[str]:
        """What the model reads: prompt + completion, or the chat template over both conversations."""
        if prompts and isinstance(prompts[0], list):
            return [self.tok.apply_chat_template(p + c, tokenize=False) for p, c in zip(prompts, completions)]
        return [str(p) + str(c) for p, c in zip(prompts, completions)]

    def __call__(self, completions: list, prompts: list, **columns) -> list[float]:
        texts, rewards = self.texts(prompts, completions), []
        for i in range(0, len(texts), self.batch_size):
            batch = self.tok(
                texts[i : i + self.batch_size],
                return_tensors="pt",
                padding=True,
                padding_side="right",
                add_special_tokens=False,
            ).to(placement.get())
            with torch.inference_mode():
                rewards += self.model(**batch).logits[:, 0].float().tolist()
        return rewards
