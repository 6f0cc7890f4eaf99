"""A fuzz pass (issue 37, item 6), bounded by a count of examples: hypothesis feeds the grid-file parser, the record
reader and the data readers what a user or a damaged tree could hand them. Any exception other than the
project's one-line errors fails (``GridError`` for grids and configs, ``TaskError`` for data; the record
reader raises nothing: it names what it could not read). Each test checks ``FUZZ_EXAMPLES``
examples (default 500, about 3 s a test on 2 cores), derandomized: each CI run replays the same ones,
and a longer pass (``FUZZ_EXAMPLES=20000``) goes further. (Until 2026-12-07 a clock stopped each test
after ``FUZZ_SECONDS``: it only made the test body return early, while hypothesis went on generating
its 3,000 examples, 13-25 s a test, and which examples were checked depended on the machine's speed.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from oxbench.grid.runs import inspect_record  # noqa: E402
from oxbench.grid.spec import GridError, expand, load_grid, load_run_config  # noqa: E402
from oxbench.tasks.errors import TaskError  # noqa: E402
from oxbench.tasks.gsm8k import load_gsm8k  # noqa: E402

FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", 500)),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,  # the same examples in every CI run: a failure reproduces
)

# the words real grids use, so the fuzzer reaches past the first unknown key
SECTIONS = ["model", "task", "data", "train", "online", "eval", "loss", "faults", "checkpoint"]
KEYS = ["name", "lr", "batch_size", "max_steps", "n", "prompts_per_batch", "rounds", "n_train", "n_test",
        "staleness", "source", "backend", "dtype", "enabled", "beta", "seed", "method", "zero_stage", "k",
        "max_new_tokens", "path", "subset", "lora", "warmup_ratio", "epochs"]  # fmt: skip
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**12), 10**12), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["sft", "dpo", "sgrpo", "tiny-s", "arith", "gsm8k", "bf16", "lean", "async", "1e-4", "", "../x"]),
    st.text(max_size=12),
)  # fmt: skip
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), inner, max_size=4),
    ),
    max_leaves=12,
)
SECTION = st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=5)
BASE = st.dictionaries(st.sampled_from(SECTIONS + ["method", "seed"]), SECTION | SCALARS, max_size=5)
AXES = st.dictionaries(
    st.sampled_from(["method", "seed", "train.lr", "online.n", "model.name", "data.n_train"])
    | st.text(max_size=10),
    st.lists(SCALARS, max_size=3) | SCALARS,
    max_size=3,
)
GRIDS = st.fixed_dictionaries(
    {}, optional={"name": st.sampled_from(["g", "", "../up", "a/b"]) | st.text(max_size=8), "base": BASE | SCALARS,
                  "axes": AXES | SCALARS, "variants": st.lists(SECTION, max_size=2) | SCALARS, "budget": SECTION}
)  # fmt: skip


def _text(data, raw: bytes | None) -> bytes:
    if raw is not None:
        return raw
    return yaml.safe_dump(data, allow_unicode=True).encode()


@pytest.mark.slow
def test_the_grid_parser_raises_only_its_one_line_error(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz_grid")

    @FUZZ
    @given(grid=GRIDS, raw=st.none() | st.binary(max_size=64))
    def check(grid, raw):
        path = d / "g.yaml"
        path.write_bytes(_text(grid, raw))
        for load in (lambda: expand(load_grid(path), str(path)), lambda: load_run_config(path)):
            try:
                load()
            except GridError as exc:
                assert "\n" not in str(exc).strip(), str(exc)

    check()


@pytest.mark.slow
def test_the_record_reader_never_raises(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz_records")
    run = root / "g" / "r"
    run.mkdir(parents=True)
    record = st.fixed_dictionaries(
        {"status": st.sampled_from(["finished", "failed", "running"]) | SCALARS},
        optional={"metrics": st.dictionaries(st.sampled_from(["accuracy", "chance"]), SCALARS) | SCALARS,
                  "run_id": SCALARS, "config": VALUES},
    )  # fmt: skip

    @FUZZ
    @given(rec=record | VALUES, raw=st.none() | st.binary(max_size=64), nest=st.integers(0, 3000))
    def check(rec, raw, nest):
        text = raw if raw is not None else json.dumps(rec).encode()
        if nest:
            text = b"[" * nest + text + b"]" * nest
        (run / "run.json").write_bytes(text)
        got, problem = inspect_record(run)
        assert (got is None) != (problem is None) and (problem is None or "\n" not in problem)
        if got is not None:
            assert isinstance(got["status"], str)

    check()


@pytest.mark.slow
def test_the_data_reader_raises_only_task_errors(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz_data")
    row = st.dictionaries(
        st.sampled_from(["question", "answer", "id"]) | st.text(max_size=5), VALUES, max_size=4
    )
    line = st.one_of(
        row.map(json.dumps), st.text(max_size=40), st.just('{"question": "q", "answer": "#### 7"}')
    )

    @FUZZ
    @given(
        lines=st.lists(line, max_size=6),
        raw=st.none() | st.binary(max_size=64),
        split=st.sampled_from(["train", "test"]),
    )
    def check(lines, raw, split):
        path = Path(d) / f"{split}.jsonl"
        path.write_bytes(raw if raw is not None else "\n".join(lines).encode())
        for source in (str(path), str(d)):
            try:
                rows = load_gsm8k(source, split=split)
            except TaskError as exc:
                assert "\n" not in str(exc).strip(), str(exc)
                continue
            assert all(isinstance(r["question"], str) and isinstance(r["answer"], str) for r in rows)

    check()
