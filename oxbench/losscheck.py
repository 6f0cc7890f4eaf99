"""The contract every loss keeps, as checks a contributor runs before opening a pull request:
``oxbench losses check MODULE:spec`` (or a registered name). Each failure is one line naming its rule.

* ``signature``: every hyper-parameter is a keyword-only parameter of ``fn`` whose default is its value
  in ``defaults`` (so ``fn(inputs, beta=0.1)`` means the spec's loss at that β);
* ``finite``: on small random inputs of its data kind (float64), the loss is a finite 0-d tensor with a
  gradient, and the gradient of every input it reads is finite;
* ``metrics``: every metric is a finite number (:class:`losses.LossOutput` detaches them: logged, not
  trained);
* ``deterministic``: the same inputs give the same loss, bit for bit;
* ``capabilities``: the loss runs on exactly the fields its flags ask the trainer to fill (a reference
  only with ``needs_reference`` or a KL coefficient, full logits only with ``needs_full_logits``, values
  only with ``needs_value_model``), and it reads the reference it asks for;
* ``trains``: three trainer steps of the real engine on a freshly initialised tiny-xs change the
  parameters, with finite losses.
"""

from __future__ import annotations

import dataclasses
import inspect
import math

import torch
import torch.nn.functional as F

import losses
from losses import LossInputs, LossSpec

DTYPE = torch.float64
REF_FIELDS = (
    "ref_chosen_logps",
    "ref_rejected_logps",
    "ref_chosen_token_logps",
    "ref_rejected_token_logps",
    "ref_logps",
    "ref_kl_logps",
    "ref_token_logps",
    "ref_chosen_logits",
    "ref_rejected_logits",
)
LOGIT_FIELDS = ("chosen_logits", "rejected_logits", "ref_chosen_logits", "ref_rejected_logits")
VALUE_FIELDS = ("values", "old_values")


def pair_inputs(seed: int = 0) -> LossInputs:
    """3 pairs, 4 positions, vocabulary 5: token log-probs are log_softmax(logits) at random ids, so
    the full-logit fields agree with them; grader scores for the losses that weight by them."""
    g = torch.Generator().manual_seed(seed)
    b, t, v = 3, 4, 5
    cmask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=DTYPE)
    rmask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=DTYPE)
    logits = [torch.randn(b, t, v, generator=g, dtype=DTYPE).requires_grad_() for _ in range(2)]
    refs = [torch.randn(b, t, v, generator=g, dtype=DTYPE) for _ in range(2)]
    ids = [torch.randint(v, (b, t), generator=g) for _ in range(2)]

    def tok(lg, which, mask):
        return F.log_softmax(lg, -1).gather(-1, ids[which].unsqueeze(-1)).squeeze(-1) * mask

    ctok, rtok = tok(logits[0], 0, cmask), tok(logits[1], 1, rmask)
    ref_c, ref_r = tok(refs[0], 0, cmask), tok(refs[1], 1, rmask)
    return LossInputs(
        chosen_logps=ctok.sum(-1),
        rejected_logps=rtok.sum(-1),
        chosen_token_logps=ctok,
        rejected_token_logps=rtok,
        chosen_mask=cmask,
        rejected_mask=rmask,
        ref_chosen_logps=ref_c.sum(-1),
        ref_rejected_logps=ref_r.sum(-1),
        ref_chosen_token_logps=ref_c,
        ref_rejected_token_logps=ref_r,
        chosen_logits=logits[0],
        rejected_logits=logits[1],
        ref_chosen_logits=refs[0],
        ref_rejected_logits=refs[1],
        chosen_rewards=torch.tensor([1.0, 1.0, 0.8], dtype=DTYPE),
        rejected_rewards=torch.tensor([0.0, 0.5, 0.1], dtype=DTYPE),
    )


def completion_inputs(seed: int, b: int = 4, t: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) token log-probs (grad leaf, zero off the mask) and the mask of ragged completions."""
    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(t)[None, :] < torch.tensor([3, 1, 2, 3][:b])[:, None]).to(DTYPE)
    logps = (-(torch.rand(b, t, generator=g, dtype=DTYPE) * 2 + 0.1) * mask).requires_grad_()
    return logps, mask


def unpaired_inputs(seed: int = 0) -> LossInputs:
    logps, mask = completion_inputs(seed)
    g = torch.Generator().manual_seed(seed + 1)
    seq = (logps * mask).sum(-1)
    return LossInputs(
        logps=seq,
        token_logps=logps,
        mask=mask,
        labels=torch.tensor([True, False, True, False]),
        ref_logps=seq.detach() - torch.rand(4, generator=g, dtype=DTYPE),
        kl_logps=seq.detach() - 0.3,
        ref_kl_logps=seq.detach() - 0.5,
    )


def sft_inputs(seed: int = 0) -> LossInputs:
    logps, mask = completion_inputs(seed)
    return LossInputs(logps=(logps * mask).sum(-1), token_logps=logps, mask=mask)


def online_inputs(seed: int = 0) -> LossInputs:
    """Two groups of two rollouts, off-policy, with a reference (for β > 0), a value head (ppo), the
    token entropy (an entropy bonus) and the generation limit the trainer fills (dr_grpo)."""
    logps, mask = completion_inputs(seed)
    g = torch.Generator().manual_seed(seed + 2)
    noise = lambda: torch.randn(4, 3, generator=g, dtype=DTYPE) * 0.1 * mask  # noqa: E731
    values = (noise() + 0.5 * mask).requires_grad_()
    return LossInputs(
        token_logps=logps,
        mask=mask,
        logps=(logps * mask).sum(-1),
        old_token_logps=logps.detach() + noise(),
        ref_token_logps=logps.detach() + noise(),
        rewards=torch.tensor([1.0, 0.0, 0.5, 1.0], dtype=DTYPE),
        group_ids=torch.tensor([0, 0, 1, 1]),
        values=values,
        old_values=values.detach() + noise(),
        token_entropy=(noise().abs() + 1.0) * mask,
        policy_versions=torch.tensor([2, 2, 3, 3]),
        current_version=3,
        max_completion_length=5,
    )


def inputs_for(spec: LossSpec, seed: int = 0) -> LossInputs:
    builder = {"pairs": pair_inputs, "unpaired": unpaired_inputs, "sft": sft_inputs, "online": online_inputs}
    return builder[spec.data](seed)


def promised(spec: LossSpec, inputs: LossInputs) -> LossInputs:
    """``inputs`` with only the fields the spec's flags ask the trainer to fill."""
    drop = set()
    if not spec.uses_reference(spec.defaults):
        drop |= set(REF_FIELDS)
    if not spec.needs_full_logits:
        drop |= set(LOGIT_FIELDS)
    if not spec.needs_value_model:
        drop |= set(VALUE_FIELDS)
    if not spec.reads_kl_pairs:
        drop |= {"kl_logps", "ref_kl_logps"}
    return dataclasses.replace(inputs, **{f: None for f in drop if hasattr(inputs, f)})


def _leaves(inputs: LossInputs) -> list[torch.Tensor]:
    return [v for v in vars(inputs).values() if isinstance(v, torch.Tensor) and v.requires_grad and v.is_leaf]


# ----------------------------------------------------------------------------------------------- rules


def rule_signature(spec: LossSpec) -> str | None:
    params = list(inspect.signature(spec.fn).parameters.values())[1:]
    loose = [
        p.name for p in params if p.kind is not inspect.Parameter.KEYWORD_ONLY and p.kind != p.VAR_KEYWORD
    ]
    if loose:
        return f"hyper-parameters must be keyword-only (after *): {', '.join(loose)}"
    found = {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
    if found != spec.defaults:
        return f"fn's keyword defaults {found} are not the spec's defaults {spec.defaults}"
    return None


def rule_finite(spec: LossSpec) -> str | None:
    inputs = inputs_for(spec)
    out = spec.fn(inputs, **spec.defaults)
    if not isinstance(out.loss, torch.Tensor) or out.loss.ndim != 0:
        return "the loss must be a 0-d tensor"
    if not math.isfinite(out.loss.item()):
        return f"the loss is {out.loss.item()} on random inputs"
    if not out.loss.requires_grad:
        return "the loss carries no gradient"
    out.loss.backward()
    bad = [
        i for i, t in enumerate(_leaves(inputs)) if t.grad is not None and not torch.isfinite(t.grad).all()
    ]
    return f"non-finite gradient in {len(bad)} input(s)" if bad else None


def rule_metrics(spec: LossSpec) -> str | None:
    out = spec.fn(inputs_for(spec), **spec.defaults)
    for k, v in out.metrics.items():
        if isinstance(v, torch.Tensor) and (v.requires_grad or v.numel() != 1):
            return f"metric {k!r} must be a detached scalar (use .detach())"
        if not math.isfinite(float(v)):
            return f"metric {k!r} is {float(v)} on random inputs"
    return None


def rule_deterministic(spec: LossSpec) -> str | None:
    a = spec.fn(inputs_for(spec, seed=3), **spec.defaults).loss
    b = spec.fn(inputs_for(spec, seed=3), **spec.defaults).loss
    return (
        None
        if torch.equal(a.detach(), b.detach())
        else f"two calls on the same inputs gave {a.item()} and {b.item()}"
    )


def rule_capabilities(spec: LossSpec) -> str | None:
    try:
        spec.fn(promised(spec, inputs_for(spec)), **spec.defaults)
    except Exception as exc:  # it read a field the trainer would not fill
        return (
            f"fails on the fields its flags promise ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})"
        )
    if spec.needs_reference and spec.data != "online":
        bare = dataclasses.replace(inputs_for(spec), **{f: None for f in REF_FIELDS})
        try:
            spec.fn(bare, **spec.defaults)
        except Exception:
            return None
        return "needs_reference is set but the loss reads no ref_* field (a reference model for nothing)"
    return None


def rule_trains(spec: LossSpec) -> str | None:
    from oxbench.config import RunConfig
    from oxbench.engine import distributed as D
    from oxbench.engine.build import train
    from oxbench.engine.plan import plan_of
    from oxbench.models.tiny import build_tiny
    from oxbench.models.tokenizer import build_char_tokenizer
    from oxbench.tasks import arith

    D.init_distributed()
    tok = build_char_tokenizer()
    torch.manual_seed(0)
    model = build_tiny("tiny-xs", len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    cfg = RunConfig(
        method=spec.name,
        model={"name": "tiny-xs"},
        data={"max_len": 128},
        train={"batch_size": 4, "max_steps": 3, "lr": 1e-3, "warmup_ratio": 0.0},
        online={"n": 4, "prompts_per_batch": 2, "rounds": 3, "max_new_tokens": 12},
    )
    before = [p.detach().clone() for p in model.parameters()]
    probs = arith.generate("train", 16, seed=0, max_operand=9)
    plan = plan_of(cfg, spec, spec.resolve_hparams(), D.world_size())
    parity = {"reward_fn": lambda completion, answer: float(len(completion) % 2)}
    data = probs if plan.caps.online else _offline_rows(spec, probs)
    engine, res = train(plan, model, tok, data, **(parity if plan.caps.online else {}))
    logged = [h["loss"] for h in res.history if "loss" in h]
    if not logged or not all(math.isfinite(x) for x in logged):
        return f"three trainer steps logged losses {logged}"
    if all(torch.equal(b, p.detach()) for b, p in zip(before, engine.module.parameters())):
        return "three trainer steps left every parameter unchanged"
    return None


def _offline_rows(spec: LossSpec, probs: list[dict]) -> list[dict]:
    """Rows of the spec's data kind from arithmetic problems (a wrong answer as the rejected one)."""
    if spec.data == "sft":
        return [{"id": p["id"], "question": p["question"], "completion": p["answer"]} for p in probs]
    wrong = [p["answer"].replace("####", "#### 1") for p in probs]
    if spec.data == "pairs":
        return [
            {
                "id": p["id"],
                "question": p["question"],
                "chosen": p["answer"],
                "rejected": w,
                "chosen_reward": 1.0,
                "rejected_reward": 0.0,
            }
            for p, w in zip(probs, wrong)
        ]
    return [
        {
            "id": f"{p['id']}/{lab}",
            "question": p["question"],
            "completion": p["answer"] if lab else w,
            "label": lab,
        }
        for p, w in zip(probs, wrong)
        for lab in (True, False)
    ]


RULES = {
    "signature": rule_signature,
    "finite": rule_finite,
    "metrics": rule_metrics,
    "deterministic": rule_deterministic,
    "capabilities": rule_capabilities,
    "trains": rule_trains,
}


def check(spec: LossSpec, rules=tuple(RULES)) -> list[str]:
    """One line per broken rule (``"<rule>: <why>"``); empty when the spec keeps the contract. A rule
    that raises is broken with the exception as its reason."""
    failures = []
    for name in rules:
        try:
            why = RULES[name](spec)
        except Exception as exc:
            why = f"raised {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"
        if why:
            failures.append(f"{name}: {why}")
    return failures


def load_spec(target: str) -> LossSpec:
    """A spec from ``MODULE:ATTR`` (imported like a plugin) or a registered name."""
    if ":" not in target:
        from oxbench.engine.plan import lookup

        return lookup(target)
    import importlib

    module, _, attr = target.partition(":")
    spec = getattr(importlib.import_module(module), attr)
    if not isinstance(spec, LossSpec):
        raise losses.LossError(f"{target} is a {type(spec).__name__}, not a losses.LossSpec")
    return spec
