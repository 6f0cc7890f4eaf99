"""Rollouts for online methods: a generation copy of the policy that knows its version.

The :class:`RolloutWorker` holds its own copy of the policy weights (as a vLLM server
would) and generates with the KV cache. ``sync`` copies the trainer's current weights in
and stamps them with the policy version; every :class:`Rollout` records the version that
produced it. Synchronising every step gives on-policy RL; synchronising less often gives
rollouts from stale policies (asynchronous RL), with the staleness visible to the loss.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from oxbench.data.batching import encode_pair, token_logps
from oxbench.data.formatting import format_prompt
from oxbench.eval.generation import generate


@dataclass
class Rollout:
    prompt_id: str
    question: str
    answer: str  # gold answer field, for the grader
    completion: str
    reward: float
    group: int  # rollouts of the same prompt share a group
    policy_version: int
    finished: bool = True  # ended with end-of-sequence (else truncated at max_new_tokens)


class RolloutWorker:
    def __init__(self, model, tokenizer, *, max_len: int):
        self.model = copy.deepcopy(model).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.tokenizer, self.max_len, self.version = tokenizer, max_len, -1

    @torch.no_grad()
    def sync(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        self.model.load_state_dict(state_dict, strict=False)
        self.version = version

    def rollouts(
        self,
        rows: list[dict],
        *,
        n: int,
        temperature: float,
        max_new_tokens: int,
        seed: int,
        reward_fn,
        group_offset: int = 0,
    ) -> list[Rollout]:
        prompts = [format_prompt(self.tokenizer, r["question"]) for r in rows]
        outs = generate(
            self.model,
            self.tokenizer,
            prompts,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            num_return_sequences=n,
            batch_size=max(1, 256 // n),
            generator_seed=seed,
            return_finished=True,
        )
        result = []
        for g, (r, comps) in enumerate(zip(rows, outs)):
            for c, done in comps:
                result.append(
                    Rollout(
                        r["id"],
                        r["question"],
                        r["answer"],
                        c,
                        float(reward_fn(c, r["answer"])),
                        group_offset + g,
                        self.version,
                        done,
                    )
                )
        return result

    def encode(self, rollouts: list[Rollout]) -> list[tuple[list[int], int]]:
        tok = self.tokenizer
        # completions are decoded without special tokens; a finished one gets its EOS back
        return [
            encode_pair(
                tok,
                format_prompt(tok, r.question),
                r.completion + (tok.eos_token if r.finished else ""),
                self.max_len,
            )
            for r in rollouts
        ]

    @torch.no_grad()
    def behaviour_logps(self, batch) -> torch.Tensor:
        """Token log-probs under the policy that generated the rollouts (``old_token_logps``)."""
        return token_logps(self.model, batch)[0]
