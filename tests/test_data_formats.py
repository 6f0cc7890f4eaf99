"""Your own training data in TRL's dataset formats (issue 42, item 3; :mod:`oxbench.data.formats`).

Every type (prompt-only, prompt-completion, preference with an explicit or implicit prompt, unpaired
preference) in either form (standard strings, conversational messages) is detected from its columns and
rendered as TRL renders it; jsonl, parquet and ``save_to_disk`` directories read alike; a file whose
columns match no format, or that cannot make the method's examples (an online method's: prompts), is
the grid's one-line error before any work; and a preference jsonl in TRL's format trains DPO, IPO and
SimPO, an unpaired one KTO and BCO's unpaired form, on the real-format checkpoint (a Qwen2 model with a
chat template) to finished records. Online methods on a file's prompts: ``tests/test_online_prompts.py``.
"""

from __future__ import annotations

import json
import math
import runpy
import sys
from pathlib import Path

import pytest
from test_cli import grid, micro_cell, one_line_error, runner, write

from oxbench.config import RunConfig
from oxbench.data import formats
from oxbench.data.formats import DataFileError
from oxbench.grid import runner as grid_runner
from oxbench.grid.runs import run_dir, stale_data
from oxbench.models.realformat import build_real_checkpoint
from oxbench.tasks import arith
from oxbench_cli import app


def msg(role: str, content: str) -> dict:
    return {"role": role, "content": content}


Q, BLUE, GREEN = msg("user", "What color is the sky?"), msg("assistant", "Blue."), msg("assistant", "Green.")
# TRL's own examples of each type (docs: "Dataset formats and types"), in both forms
STANDARD = {
    "prompt_only": {"prompt": "The sky is"},
    "prompt_completion": {"prompt": "The sky is", "completion": " blue."},
    "preference": {"prompt": "The sky is", "chosen": " blue.", "rejected": " green."},
    "implicit_preference": {"chosen": "The sky is blue.", "rejected": "The sky is green."},
    "unpaired": {"prompt": "The sky is", "completion": " blue.", "label": True},
}
CONVERSATIONAL = {
    "prompt_only": {"prompt": [Q]},
    "prompt_completion": {"prompt": [Q], "completion": [BLUE]},
    "preference": {"prompt": [Q], "chosen": [BLUE], "rejected": [GREEN]},
    "implicit_preference": {"chosen": [Q, BLUE], "rejected": [Q, GREEN]},
    "unpaired": {"prompt": [Q], "completion": [BLUE], "label": True},
}
FORMS = [(t, False) for t in STANDARD] + [(t, True) for t in CONVERSATIONAL]


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def example(kind: str, conversational: bool) -> dict:
    return (CONVERSATIONAL if conversational else STANDARD)[kind]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """The real-format checkpoint (Qwen2, byte-level BPE, Qwen's chat template), its tokenizer trained on
    a few hundred arith problems: built in about 2 s."""
    d = tmp_path_factory.mktemp("realformat")
    texts = [{"question": r["question"], "answer": r["answer"]} for r in arith.generate("train", 200, seed=0)]
    return build_real_checkpoint(d / "model", jsonl(d / "texts.jsonl", texts), vocab_size=512)


@pytest.fixture(scope="module")
def tok(checkpoint):
    from oxbench.models.loading import load_tokenizer

    return load_tokenizer(str(checkpoint))


@pytest.mark.parametrize("kind,conversational", FORMS)
def test_every_type_is_detected_in_either_form(tmp_path, kind, conversational):
    row = {**example(kind, conversational), "source": "extra columns are ignored"}
    data = formats.load(jsonl(tmp_path / "d.jsonl", [row, row]))
    assert (data.type, data.conversational, len(data.rows)) == (kind, conversational, 2)
    assert "source" not in data.rows[0] and data.extra[0] == {"source": "extra columns are ignored"}


def test_a_string_prompt_beside_conversational_pairs_is_an_implicit_prompt(tmp_path):
    """As TRL's ``maybe_extract_prompt``: the prompt column is a copy of what the pair holds."""
    row = {"prompt": "What color is the sky?", **CONVERSATIONAL["implicit_preference"]}
    assert formats.load(jsonl(tmp_path / "d.jsonl", [row])).type == "implicit_preference"


@pytest.mark.parametrize("kind,conversational", FORMS)
def test_rows_render_as_trl_renders_them(tmp_path, tok, kind, conversational):
    """Conversational rows: TRL's ``apply_chat_template`` text (after its ``extract_prompt`` for an
    implicit prompt); standard rows: as written, the prompt split off an implicit pair as TRL splits it,
    and each completion ending in the end-of-sequence token (TRL's DPO and KTO trainers add it)."""
    trl = pytest.importorskip("trl")
    row = example(kind, conversational)
    [got] = formats.render(formats.load(jsonl(tmp_path / "d.jsonl", [row])), tok)
    want = trl.extract_prompt(row) if kind == "implicit_preference" else dict(row)
    if conversational:
        want = trl.apply_chat_template(want, tok)
    else:
        want |= {k: v + tok.eos_token for k, v in want.items() if k in ("completion", "chosen", "rejected")}
    assert got == want
    if conversational and kind != "prompt_only":
        assert got["prompt"].endswith("<|im_start|>assistant\n") and got.get("chosen", got.get("completion"))
        assert (got.get("chosen") or got["completion"]).startswith("Blue.<|im_end|>")


def test_columns_that_match_no_format_fail_in_one_line_naming_them_and_the_formats(tmp_path):
    path = jsonl(tmp_path / "gsm8k_like.jsonl", [{"question": "2 + 2?", "answer": "#### 4"}])
    with pytest.raises(DataFileError) as err:
        formats.load(path)
    text = str(err.value)
    assert len(text.splitlines()) == 1 and str(path) in text and "(question, answer)" in text
    for name in ("prompt-only (prompt)", "prompt-completion (prompt, completion)"):
        assert name in text
    for name in ("preference (prompt, chosen, rejected)", "implicit prompt (chosen, rejected)"):
        assert name in text
    assert "unpaired preference (prompt, completion, label)" in text


@pytest.mark.parametrize(
    "rows,needle",
    [
        ([STANDARD["preference"], {"prompt": "x", "chosen": "y"}], "line 2: missing column 'rejected'"),
        ([{**STANDARD["unpaired"], "label": 1}], "line 1: column 'label' must be true or false, got 1"),
        (
            [STANDARD["preference"], CONVERSATIONAL["preference"]],
            "line 2: column 'prompt' is a list of messages",
        ),
        (
            [CONVERSATIONAL["preference"], STANDARD["preference"]],
            "line 2: column 'prompt' must be a non-empty list",
        ),
        (
            [{"prompt": [{"role": "user"}], "completion": [BLUE]}],
            "message 0: expected {role, content} strings",
        ),
    ],
)
def test_a_bad_row_is_one_line_naming_the_line_and_column(tmp_path, rows, needle):
    path = jsonl(tmp_path / "d.jsonl", rows)
    with pytest.raises(DataFileError) as err:
        formats.load(path)
    assert needle in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


def test_an_implicit_pair_without_a_difference_is_named(tmp_path, tok):
    path = jsonl(tmp_path / "d.jsonl", [{"chosen": "The sky is blue.", "rejected": "The sky is blue."}])
    with pytest.raises(DataFileError, match="row 1: chosen and rejected must differ after a common prompt"):
        formats.render(formats.load(path), tok)


def test_parquet_and_save_to_disk_read_as_jsonl_does(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [CONVERSATIONAL["preference"], {"prompt": [Q], "chosen": [GREEN], "rejected": [BLUE]}]
    want = formats.load(jsonl(tmp_path / "d.jsonl", rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    assert formats.load(tmp_path / "d.parquet").rows == want.rows
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
    assert formats.load(tmp_path / "saved").rows == want.rows
    whole = datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)})
    whole.save_to_disk(str(tmp_path / "dict"))
    loaded = formats.load(tmp_path / "dict")
    assert (loaded.type, loaded.conversational, loaded.rows) == ("preference", True, want.rows)


def test_without_datasets_a_saved_directory_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "saved").mkdir()
    (tmp_path / "saved" / "state.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "datasets", None)  # the GPU image has no datasets
    with pytest.raises(DataFileError, match="saved: reading a save_to_disk directory needs datasets"):
        formats.load(tmp_path / "saved")
    with pytest.raises(DataFileError, match="not one written by datasets' save_to_disk"):
        formats.load(tmp_path)
    with pytest.raises(DataFileError, match="unsupported data file '.csv'"):
        formats.load(write(tmp_path, "d.csv", "prompt\nx\n"))


def test_each_kind_of_example_from_each_type(tmp_path, tok):
    """Pairs from preference rows; unpaired examples from unpaired rows or from pairs (one of each label);
    SFT completions from prompt-completion rows, pairs' chosen sides and rows labelled true; the first
    ``n`` rows only."""
    pairs = formats.load(jsonl(tmp_path / "p.jsonl", [STANDARD["preference"]] * 3))
    rows, stats = formats.training_rows(pairs, "pairs", tok, n=2)
    assert [r["id"] for r in rows] == ["row-0", "row-1"] and stats["pairs"] == 2 and stats["rows"] == 2
    assert (
        rows[0]["prompt"] == rows[0]["question"] == "The sky is" and rows[0]["chosen"] == " blue.<|im_end|>"
    )
    unpaired, _ = formats.training_rows(pairs, "unpaired", tok, n=1)
    assert [(r["id"], r["completion"], r["label"]) for r in unpaired] == [
        ("row-0/chosen", " blue.<|im_end|>", True),
        ("row-0/rejected", " green.<|im_end|>", False),
    ]
    assert [r["completion"] for r in formats.training_rows(pairs, "sft", tok)[0]] == [" blue.<|im_end|>"] * 3
    labelled = [STANDARD["unpaired"], {**STANDARD["unpaired"], "completion": " red.", "label": False}]
    data = formats.load(jsonl(tmp_path / "u.jsonl", labelled))
    assert [r["label"] for r in formats.training_rows(data, "unpaired", tok)[0]] == [True, False]
    assert [r["completion"] for r in formats.training_rows(data, "sft", tok)[0]] == [" blue.<|im_end|>"]
    with pytest.raises(
        DataFileError, match="holds standard unpaired preference rows, which make no preference"
    ):
        formats.check(data.path, "pairs")


def _grid_with_data(tmp_path: Path, model_dir: str, path: Path, method: str) -> Path:
    base = micro_cell(model_dir)
    base["data"] = {**base["data"], "path": str(path)}
    return write(tmp_path, "g.yaml", grid(model_dir, base=base, axes={"method": [method]}))


@pytest.mark.parametrize(
    "row,method,needles",
    [
        (
            {"question": "q", "answer": "a"},
            "dpo",
            ("columns (question, answer) match no dataset format", "accepted:"),
        ),
        (STANDARD["unpaired"], "dpo", ("unpaired preference rows, which make no preference pairs",)),
        (STANDARD["prompt_only"], "kto", ("prompt-only rows, which make no unpaired examples",)),
        (STANDARD["implicit_preference"], "sgrpo", ("which give no prompts; online methods train on",)),
    ],
)
def test_a_data_file_that_cannot_train_the_cell_is_the_grid_s_one_line_error(
    tmp_path, micro_model_dir, row, method, needles
):
    """Found by ``oxbench run --plan`` (the grid's validation), exit 2, before any model loads."""
    path = jsonl(tmp_path / "mine.jsonl", [row])
    result = runner.invoke(
        app, ["run", "--grid", str(_grid_with_data(tmp_path, micro_model_dir, path, method)), "--plan"]
    )
    one_line_error(result, "g.yaml", "field 'data.path'", str(path), *needles)


def test_a_good_data_file_plans_and_enters_the_run_id(tmp_path, micro_model_dir):
    path = jsonl(tmp_path / "mine.jsonl", [STANDARD["preference"]])
    result = runner.invoke(
        app, ["run", "--grid", str(_grid_with_data(tmp_path, micro_model_dir, path, "dpo")), "--plan"]
    )
    assert result.exit_code == 0, result.output
    plain = RunConfig(model={"name": micro_model_dir}, method="dpo")
    mine = plain.model_copy(update={"data": plain.data.model_copy(update={"path": str(path)})})
    assert "path" not in plain.data.hash_view() and mine.run_id() != plain.run_id()


def test_the_example_is_make_data_s_and_plans(monkeypatch):
    """``examples/byod/``: its files are what ``make_data.py`` writes, of the types the grid needs, and
    ``docs/data.md``'s command plans (run from the repository's root, as the page says)."""
    root = Path(__file__).resolve().parents[1]
    made = runpy.run_path(str(root / "examples" / "byod" / "make_data.py"))["files"]()
    for name, text in made.items():
        assert (root / "examples" / "byod" / name).read_text() == text, name
    assert formats.check(root / "examples" / "byod" / "pairs.jsonl", "pairs").type == "preference"
    assert formats.check(root / "examples" / "byod" / "unpaired.jsonl", "unpaired").type == "unpaired"
    monkeypatch.chdir(root)
    result = runner.invoke(app, ["run", "--grid", "examples/byod/grid.yaml", "--plan"])
    assert result.exit_code == 0 and "5 cells" in result.output, result.output


def _cfg(checkpoint: Path, path: Path, method: str) -> RunConfig:
    return RunConfig(
        grid="byod",
        method=method,
        model={"name": str(checkpoint)},
        task={"name": "arith"},
        data={"path": str(path), "n_train": 4, "max_len": 96, "max_new_tokens": 8},
        train={"batch_size": 2, "max_steps": 2, "lr": 1e-4, "warmup_ratio": 0.0, "schedule": "constant"},
        eval={"n_test": 2, "n_ood": 0, "k": 0, "max_new_tokens": 8},
        track=[],
    )


def _preference_rows() -> list[dict]:
    """Four conversational pairs in TRL's format: the right sum against a wrong one."""
    rows = []
    for a, b in ((2, 3), (4, 5), (7, 1), (6, 6)):
        ask = msg("user", f"What is {a} + {b}?")
        rows.append(
            {
                "prompt": [ask],
                "chosen": [msg("assistant", f"#### {a + b}")],
                "rejected": [msg("assistant", f"#### {a + b + 1}")],
            }
        )
    return rows


@pytest.mark.slow
def test_trl_preference_and_unpaired_files_train_the_real_format_checkpoint(tmp_path, checkpoint):
    """DPO, IPO and SimPO on a preference jsonl, KTO and BCO's unpaired form on an unpaired one: finished
    records whose data is the file's (no self-play), two optimiser steps that moved the weights; BCO's
    running reward mean is over both steps' rewards."""
    pref = jsonl(tmp_path / "pref.jsonl", _preference_rows())
    unpaired = [
        {"prompt": r["prompt"], "completion": r[side], "label": side == "chosen"}
        for r in _preference_rows()
        for side in ("chosen", "rejected")
    ]
    unpaired_path = jsonl(tmp_path / "unpaired.jsonl", unpaired)
    cells = [(m, pref) for m in ("dpo", "ipo", "simpo")] + [
        (m, unpaired_path) for m in ("kto", "bco_unpaired")
    ]
    for method, path in cells:
        cfg = _cfg(checkpoint, path, method)
        rec = grid_runner.run_cell(cfg, tmp_path / "out", verbose=False)
        assert rec["status"] == "finished", (method, rec.get("error"), rec.get("traceback"))
        assert rec["data"]["source"] == "file" and rec["data"]["conversational"] is True
        assert rec["data"]["examples"] == 4 and "self_play_key" not in rec["data"]
        assert rec["data_files"]["data.path"] and rec["optimizer_steps"] == 2
        steps = [
            json.loads(x)
            for x in (run_dir(tmp_path / "out", "byod", cfg.run_id()) / "metrics.jsonl")
            .read_text()
            .splitlines()
        ]
        assert all(math.isfinite(s["loss"]) for s in steps) and any(s["grad_norm"] > 0 for s in steps)
    assert rec["data"]["format"] == "unpaired" and stale_data(rec) is None
    assert rec["method"] == "bco_unpaired" and rec["loss_state"]["count"] == 4  # 2 steps x 2 examples
    path.write_text(path.read_text().replace("#### 5", "#### 4"))  # the file changes: its record is stale
    assert stale_data(rec) == "stale: its data.path data changed since it ran"
