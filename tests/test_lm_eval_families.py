"""The bundled general-domain and harder in-domain lm-eval tasks: what lm-eval scores is what oxbench
means, and a run records them beside its own evaluation (trained model and base)."""

from __future__ import annotations

import pytest
import torch

from analysis.runs import load_runs
from oxbench.config import RunConfig
from oxbench.eval import lm_eval_path
from oxbench.eval.lm_eval_path import check_tasks, lm_eval_metrics, load_arith_hard, load_general, run_lm_eval
from oxbench.tasks import HARD_EXTRA_OPS
from oxbench.tasks.arith import working_lines
from oxbench.tasks.lm_eval_tasks import bundled

GENERAL = {"oxbench_order": "general", "oxbench_next": "general", "oxbench_reverse": "general"}


@pytest.fixture(scope="module")
def micro():
    from conftest import make_micro_model

    model, tok = make_micro_model(seed=3)
    return model.eval(), tok


def continuation_logp(model, tok, context: str, continuation: str) -> float:
    """Sum of log p(continuation | context), one character a token (the char tokenizer)."""
    ids = tok(context + continuation, return_tensors="pt", add_special_tokens=False)["input_ids"]
    n = len(tok(continuation, add_special_tokens=False)["input_ids"])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, :-1].double(), -1)
    targets = ids[0, 1:]
    return float(logp[-n:].gather(1, targets[-n:, None]).sum())


@pytest.mark.parametrize("task", ["oxbench_order", "oxbench_next"])
def test_multiple_choice_scores_are_our_log_likelihood_argmax(micro, task):
    """Per document, lm-eval's acc is 1 exactly when the gold choice has the largest log-likelihood
    computed here by hand. The prompt ends "Answer: " (the pre-training's format, choice with no
    delimiter); HFLM moves a context's trailing space into the continuation, so its number is
    log p(" " + choice | "...Answer:") = log p(" " | "...Answer:") + log p(choice | "...Answer: "): the same
    first term for every choice, so the same argmax as the pre-training format's."""
    model, tok = micro
    res = run_lm_eval(model, tok, [task], limit=12, batch_size=4, log_samples=True)
    samples = res["samples"][task]
    assert len(samples) == 12
    for s in samples:
        doc = s["doc"]
        context = f"Question: {doc['question']}\nAnswer:"
        theirs = [r[0][0] for r in s["resps"]]
        assert theirs == pytest.approx(
            [continuation_logp(model, tok, context, " " + c) for c in doc["choices"]], abs=1e-3
        )
        ours = [continuation_logp(model, tok, context + " ", c) for c in doc["choices"]]
        assert s["acc"] == float(max(range(4), key=ours.__getitem__) == doc["gold"])
        offsets = [t - o for t, o in zip(theirs, ours)]
        assert max(offsets) - min(offsets) < 1e-3


def test_reverse_is_exact_match_on_the_pretraining_prompt(micro):
    model, tok = micro
    res = run_lm_eval(
        model, tok, ["oxbench_reverse"], limit=6, batch_size=6, max_gen_toks=8, log_samples=True
    )
    for s in res["samples"]["oxbench_reverse"]:
        assert s["arguments"][0][0].endswith("\nAnswer: ")
        assert s["exact_match"] == float(s["resps"][0][0].lstrip() == s["doc"]["answer"])


def test_hooks_build_the_test_splits():
    assert len(load_general("next")["test"]) == 181
    order = load_general("order", n_test=20)["test"]
    assert len(order) == 20 and order[0]["id"] == "general-order-test-0"
    hard = load_arith_hard(arith_n_ops=1, arith_max_operand=9, n_test=10)["test"]
    for row in hard:
        lines = working_lines(row["answer"])
        assert len(lines) == 1 + HARD_EXTRA_OPS and all(b <= 9 for _, _, b, _ in lines)


def test_bundled_names_need_no_index(monkeypatch):
    """Bundled tasks are checked from their YAMLs alone; lm-eval's index is never built for them."""
    import lm_eval.tasks

    monkeypatch.setattr(lm_eval.tasks, "TaskManager", lambda *a, **k: pytest.fail("index built"))
    check_tasks.cache_clear()
    check_tasks(tuple(bundled()))
    with pytest.raises(ValueError, match="did you mean 'oxbench_reverse'"):
        check_tasks(("oxbench_revers",))


def test_run_metrics_carry_the_headline_number_chance_and_size(micro):
    model, tok = micro
    cfg = RunConfig(eval={"lm_eval": {"tasks": {**GENERAL, "oxbench_arith_hard": "hard"}, "limit": 5,
                                      "max_gen_toks": 8}})  # fmt: skip
    m = lm_eval_metrics(model, tok, cfg)
    assert set(m) == {f"lmeval_{t}{s}" for t in cfg.eval.lm_eval.tasks for s in ("", "_chance", "_n")} | {
        "lmeval_oxbench_arith_hard_flexible"  # the strict-match task keeps its flexible score too
    }
    assert m["lmeval_oxbench_arith_hard_flexible"] >= m["lmeval_oxbench_arith_hard"]
    assert (m["lmeval_oxbench_order_chance"], m["lmeval_oxbench_reverse_chance"]) == (0.25, 0.0)
    assert 0 < m["lmeval_oxbench_arith_hard_chance"] < 0.05  # answers of 4 operations on 1-40 spread wide
    assert all(m[f"lmeval_{t}_n"] == 5 for t in cfg.eval.lm_eval.tasks)
    assert all(0 <= m[f"lmeval_{t}"] <= 1 for t in cfg.eval.lm_eval.tasks)


def test_a_run_records_lm_eval_families_for_the_model_and_its_base(tmp_path, micro_model_dir):
    from oxbench.grid.runner import run_cell

    cfg = RunConfig(grid="fam", method="sft", model={"name": micro_model_dir}, track=[],
                    train={"batch_size": 4, "lr": 1e-3, "max_steps": 2}, data={"n_train": 8},
                    eval={"n_test": 4, "n_ood": 4, "k": 0, "max_new_tokens": 8,
                          "lm_eval": {"tasks": {"oxbench_order": "general", "oxbench_arith_hard": "hard"},
                                      "limit": 4, "max_gen_toks": 8}})  # fmt: skip
    rec = run_cell(cfg, tmp_path, verbose=False)
    assert rec["status"] == "finished", rec["error"]
    m = rec["metrics"]
    for t in ("oxbench_order", "oxbench_arith_hard"):
        assert m[f"lmeval_{t}_n"] == 4 and f"base_lmeval_{t}" in m and f"base_lmeval_{t}_n" not in m
    assert "base_lmeval_oxbench_arith_hard_flexible" in m and "lmeval_oxbench_order_flexible" not in m
    df = load_runs(tmp_path / "fam")
    assert df.loc[0, "domain_general"] == m["lmeval_oxbench_order"]
    assert df.loc[0, "base_domain_hard"] == m["base_lmeval_oxbench_arith_hard"]
    assert df.loc[0, "domain_general_chance"] == 0.25


def test_an_lm_eval_task_that_reports_no_known_metric_is_an_error(micro, monkeypatch):
    model, tok = micro
    fake = {"results": {"oxbench_order": {"alias": "x", "bleu,none": 0.3}}, "n-samples": {}}
    monkeypatch.setattr(lm_eval_path, "run_lm_eval", lambda *a, **k: fake)
    cfg = RunConfig(eval={"lm_eval": {"tasks": {"oxbench_order": "general"}}})
    with pytest.raises(ValueError, match="'oxbench_order' reported none of"):
        lm_eval_metrics(model, tok, cfg)
