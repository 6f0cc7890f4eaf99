"""How a problem becomes model text: one prompt format for every method and the evaluator."""

from __future__ import annotations

INSTRUCTION = "Solve the problem step by step. End with a line '#### <answer>'."


def format_prompt(tokenizer, question: str) -> str:
    """Chat models get their chat template; the tiny models get ``Question: ...\\nAnswer: ``."""
    if getattr(tokenizer, "chat_template", None):
        messages = [{"role": "user", "content": f"{question}\n{INSTRUCTION}"}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return f"Question: {question}\nAnswer: "


def format_completion(tokenizer, answer: str) -> str:
    """The target text after the prompt: the GSM8K answer field and the end-of-sequence token."""
    return answer.strip() + tokenizer.eos_token
