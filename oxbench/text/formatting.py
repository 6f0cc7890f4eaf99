"""How a problem becomes model text: one prompt format for every method and the evaluator."""

from __future__ import annotations

from dataclasses import dataclass

INSTRUCTION = "Solve the problem step by step. End with a line '#### <answer>'."
PLAIN = "Question: {question}\nAnswer: "


def format_prompt(tokenizer, question: str) -> str:
    """Chat models get their chat template; the tiny models get ``Question: ...\\nAnswer: ``."""
    if getattr(tokenizer, "chat_template", None):
        messages = [{"role": "user", "content": f"{question}\n{INSTRUCTION}"}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return f"Question: {question}\nAnswer: "


@dataclass(frozen=True)
class PromptFormat:
    """A task's prompt format (:class:`oxbench.tasks.TaskSpec`'s ``prompt``): under a tokenizer's chat
    template, the question and then ``instruction`` as the user's message (after ``system``, if given);
    without one, ``plain`` with the question put in. ``PromptFormat()`` writes what :func:`format_prompt`
    writes. A plain value, so it travels to the rollout producer's process."""

    instruction: str = INSTRUCTION
    plain: str = PLAIN
    system: str | None = None

    def __call__(self, tokenizer, question: str) -> str:
        if getattr(tokenizer, "chat_template", None):
            content = f"{question}\n{self.instruction}" if self.instruction else question
            system = [{"role": "system", "content": self.system}] if self.system else []
            messages = [*system, {"role": "user", "content": content}]
            return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self.plain.replace("{question}", question)


def format_completion(tokenizer, answer: str) -> str:
    """The target text after the prompt: the GSM8K answer field and the end-of-sequence token."""
    return answer.strip() + tokenizer.eos_token
