"""Training rows of your own, in TRL's dataset formats, from a local file (``data.path``).

A file is a ``.jsonl`` file, a ``.parquet`` file or a directory written by ``datasets``'
``save_to_disk`` (a ``DatasetDict``'s ``train`` split). Its columns say its type, as in TRL:

* prompt-only, ``prompt``: online methods (their rollouts' prompts, rewarded by ``online.rewards``);
* prompt-completion, ``prompt``, ``completion``: SFT methods; online methods (its prompts);
* preference, ``prompt``, ``chosen``, ``rejected``: pair losses (BCO's paired form too); KTO and BCO's
  unpaired form (each pair one desirable and one undesirable row); SFT methods (the chosen completions);
* preference with an implicit prompt, ``chosen``, ``rejected`` (the prompt is their common start): as
  preference;
* unpaired preference, ``prompt``, ``completion``, ``label`` (true: desirable): KTO and BCO's unpaired
  form; SFT methods (the rows labelled true).

An online method samples its rollouts' prompts from a file with a ``prompt`` column (every type but the
implicit prompt's): every other column of a row reaches the reward functions as a keyword argument, as
in TRL's ``GRPOTrainer`` (:func:`prompt_rows`). Offline, other columns are ignored. Each text column is *standard* (a string) or *conversational* (a list of
``{"role", "content"}`` messages), as the first row has it. Rows become text as TRL's trainers make it:
standard rows as written, with the end-of-sequence token appended to each completion that lacks it;
conversational rows through the tokenizer's chat template (the prompt with the generation prompt, each
completion the template's text after it). An implicit prompt is the longest common start of ``chosen``
and ``rejected`` (TRL's ``extract_prompt``). The internal rows carry the rendered ``prompt``, which the
batch builder (:func:`oxbench.engine.batches.encode_examples`) uses as it is, instead of formatting a
task's question. Every problem is a :class:`DataFileError`: one line naming the file (and the row).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import takewhile
from pathlib import Path

from oxbench.tasks.errors import TaskError, TaskFileNotFoundError
from oxbench.tasks.rewards import FILE_ROW

# type -> its columns; the order is detection's: the first whose columns the file has
TYPES = {
    "preference": ("prompt", "chosen", "rejected"),
    "implicit_preference": ("chosen", "rejected"),
    "unpaired": ("prompt", "completion", "label"),
    "prompt_completion": ("prompt", "completion"),
    "prompt_only": ("prompt",),
}
NAMES = {
    "preference": "preference",
    "implicit_preference": "preference with implicit prompt",
    "unpaired": "unpaired preference",
    "prompt_completion": "prompt-completion",
    "prompt_only": "prompt-only",
}
ORDER = ("prompt_only", "prompt_completion", "preference", "implicit_preference", "unpaired")
ACCEPTED = "; ".join(f"{NAMES[t]} ({', '.join(TYPES[t])})" for t in ORDER)
# the column whose value in the first row says whether the file is conversational
FORM_COLUMN = {
    "preference": "chosen",
    "implicit_preference": "chosen",
    "unpaired": "completion",
    "prompt_completion": "completion",
    "prompt_only": "prompt",
}
PAIRED = ("preference", "implicit_preference")
# an offline method's kind of example (a loss's ``data``) -> the types that make it
TAKES = {
    "pairs": PAIRED,
    "unpaired": ("unpaired", *PAIRED),
    "sft": ("prompt_completion", *PAIRED, "unpaired"),
}
KIND_NAMES = {"pairs": "preference pairs", "unpaired": "unpaired examples", "sft": "completions"}
# the types an online method takes its prompts from: those with a prompt column
ONLINE = ("prompt_only", "prompt_completion", "preference", "unpaired")
ONLINE_ACCEPTED = (
    "prompt-only (prompt); or a prompt-completion, preference or unpaired preference file's prompts (its "
    "other columns go to the reward functions)"
)
SUFFIXES = (".jsonl", ".parquet")


class DataFileError(TaskError):
    """A data file that cannot be used: its columns, a row's values, its kind of file."""


@dataclass(frozen=True)
class DataFile:
    """A file read and checked: its type (a :data:`TYPES` key), whether its rows are conversational,
    the columns it has, its rows (each the type's columns) and each row's other columns (``extra``)."""

    path: Path
    type: str
    conversational: bool
    columns: tuple[str, ...]
    rows: list[dict]
    extra: list[dict] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{'conversational' if self.conversational else 'standard'} {NAMES[self.type]}"


def detect(columns, first: dict | None = None) -> str | None:
    """The type of a file with these columns (None: none). With the first row: a string ``prompt``
    beside conversational ``chosen``/``rejected`` is an implicit prompt (TRL's ``maybe_extract_prompt``)."""
    have = set(columns)
    found = next((t for t, cols in TYPES.items() if set(cols) <= have), None)
    if found == "preference" and first is not None:
        if is_conversational(first.get("prompt")) != is_conversational(first.get("chosen")):
            return "implicit_preference"
    return found


def is_conversational(value) -> bool:
    """Whether a column's value is a list of messages (TRL's ``is_conversational``)."""
    return isinstance(value, list) and bool(value) and isinstance(value[0], dict) and "role" in value[0]


def load(path: str | Path) -> DataFile:
    """Read, detect and check every row of a data file."""
    path = Path(path).expanduser()
    columns, located = read_records(path)
    if not located:
        raise DataFileError(f"{path}: no rows")
    first = located[0][1]
    kind = detect(columns, first if isinstance(first, dict) else None)
    if kind is None:
        found = ", ".join(columns) or "none"
        raise DataFileError(f"{path}: its columns ({found}) match no dataset format; accepted: {ACCEPTED}")
    conversational = is_conversational(first.get(FORM_COLUMN[kind]))
    rows = [_checked(where, row, kind, conversational) for where, row in located]
    extra = [{k: v for k, v in row.items() if k not in TYPES[kind]} for _, row in located]
    return DataFile(path, kind, conversational, tuple(columns), rows, extra)


def _checked(where: str, row, kind: str, conversational: bool) -> dict:
    """The row's columns of ``kind``, each of the file's form (a string, or messages), ``label`` a bool."""
    if not isinstance(row, dict):
        raise DataFileError(f"{where}: expected an object with columns {', '.join(TYPES[kind])}")
    out = {}
    for col in TYPES[kind]:
        if col not in row:
            raise DataFileError(f"{where}: missing column '{col}'")
        value = row[col]
        if col == "label":
            if not isinstance(value, bool):
                raise DataFileError(f"{where}: column 'label' must be true or false, got {value!r}")
        elif conversational:
            _check_messages(where, col, value)
        elif not isinstance(value, str):
            form = "a list of messages" if is_conversational(value) else type(value).__name__
            raise DataFileError(
                f"{where}: column '{col}' is {form}, not a string as the file's first '{FORM_COLUMN[kind]}' is"
            )
        out[col] = value
    return out


def _check_messages(where: str, col: str, value) -> None:
    if not isinstance(value, list) or not value:
        raise DataFileError(
            f"{where}: column '{col}' must be a non-empty list of messages (the file's first row is "
            f"conversational), got {type(value).__name__}"
        )
    for i, m in enumerate(value):
        ok = isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        if not ok:
            raise DataFileError(f"{where}: column '{col}' message {i}: expected {{role, content}} strings")


def read_records(path: Path) -> tuple[list[str], list[tuple[str, object]]]:
    """The columns and the located rows (``(where, row)``) of a jsonl, parquet or ``save_to_disk`` file."""
    if path.is_dir():
        return _read_saved(path)
    if not path.is_file():
        raise TaskFileNotFoundError(f"{path}: no such file or directory")
    if path.suffix.lower() == ".jsonl":
        from oxbench.tasks.gsm8k import _read_jsonl

        located = list(_read_jsonl(path))
        first = located[0][1] if located else {}
        return (list(first) if isinstance(first, dict) else []), located
    if path.suffix.lower() == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise DataFileError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from None
        try:
            table = pq.read_table(path)
        except Exception as e:  # noqa: BLE001 - a damaged file is one line
            raise DataFileError(f"{path}: not a readable parquet file ({type(e).__name__})") from None
        return table.column_names, [(f"{path}: row {i}", r) for i, r in enumerate(table.to_pylist(), 1)]
    raise DataFileError(
        f"{path}: unsupported data file {path.suffix!r}: a .jsonl or .parquet file, or a directory "
        "written by datasets' save_to_disk"
    )


def _read_saved(path: Path) -> tuple[list[str], list[tuple[str, object]]]:
    """A ``save_to_disk`` directory (a ``DatasetDict``: its ``train`` split), read with ``datasets``."""
    if not any((path / n).is_file() for n in ("state.json", "dataset_dict.json")):
        raise DataFileError(f"{path}: a directory, but not one written by datasets' save_to_disk")
    try:
        import datasets
    except ImportError:
        raise DataFileError(
            f"{path}: reading a save_to_disk directory needs datasets (pip install datasets)"
        ) from None
    ds = datasets.load_from_disk(str(path))
    if isinstance(ds, datasets.DatasetDict):
        if "train" not in ds:
            raise DataFileError(f"{path}: a DatasetDict without a 'train' split (has {', '.join(ds)})")
        ds, path = ds["train"], path / "train"
    return list(ds.column_names), [(f"{path}: row {i}", r) for i, r in enumerate(ds.to_list(), 1)]


def check(path: str | Path, kind: str) -> DataFile:
    """The file, checked to make examples of ``kind`` (a loss's ``data``: sft, pairs, unpaired; ``online``
    for a method that trains online): a :class:`DataFileError` naming the file's type and what fits."""
    data = load(path)
    if kind == "online":
        if data.type not in ONLINE:
            raise DataFileError(
                f"{data.path}: holds {data.name} rows, which give no prompts; online methods train on "
                f"{ONLINE_ACCEPTED}"
            )
        return data
    if data.type not in TAKES[kind]:
        takes = " or ".join(f"{NAMES[t]} ({', '.join(TYPES[t])})" for t in TAKES[kind])
        raise DataFileError(
            f"{data.path}: holds {data.name} rows, which make no {KIND_NAMES[kind]}; the method "
            f"trains on {takes}"
        )
    return data


def split_implicit(chosen, rejected) -> tuple:
    """``(prompt, chosen, rejected)`` from an implicit-prompt pair: the prompt is their longest common
    start (messages, or characters, less a space that ends it), as TRL's ``extract_prompt``."""
    n = sum(1 for _ in takewhile(lambda ab: ab[0] == ab[1], zip(chosen, rejected)))
    if n == len(chosen) or n == len(rejected):
        return None
    if isinstance(chosen, str) and n > 0 and chosen[n - 1] == " ":
        n -= 1
    return chosen[:n], chosen[n:], rejected[n:]


def _common_start(a: str, b: str) -> str:
    return "".join(x for x, _ in takewhile(lambda xy: xy[0] == xy[1], zip(a, b)))


def render_chat(tokenizer, prompt: list[dict], completions: dict[str, list[dict]]) -> dict[str, str]:
    """A conversational row as text, as TRL's ``apply_chat_template``: the prompt through the chat
    template with the generation prompt (continuing a final assistant message instead), and each
    completion the text the template gives the whole conversation after the prompt."""
    cont = prompt[-1]["role"] == "assistant"
    text = tokenizer.apply_chat_template(
        prompt, tokenize=False, add_generation_prompt=not cont, continue_final_message=cont
    )
    whole = {
        k: tokenizer.apply_chat_template(prompt + msgs, tokenize=False) for k, msgs in completions.items()
    }
    for full in whole.values():  # templates whose generation prompt differs from the next turn's start
        text = _common_start(text, full)
    return {"prompt": text, **{k: full[len(text) :] for k, full in whole.items()}}


def render(data: DataFile, tokenizer, n: int | None = None) -> list[dict]:
    """The first ``n`` rows (None: all) as text: ``{"prompt", completions..., "label"?}``."""
    eos = tokenizer.eos_token or ""
    if data.conversational and not getattr(tokenizer, "chat_template", None):
        raise DataFileError(f"{data.path}: conversational rows need a chat template; the tokenizer has none")
    out = []
    for i, row in enumerate(data.rows[:n], 1):
        row = dict(row)
        if data.type == "implicit_preference":
            parts = split_implicit(row["chosen"], row["rejected"])
            if parts is None or (data.conversational and not parts[0]):
                raise DataFileError(
                    f"{data.path}: row {i}: chosen and rejected must differ after a common prompt"
                )
            row["prompt"], row["chosen"], row["rejected"] = parts
        texts = {k: v for k, v in row.items() if k != "prompt" and k != "label"}
        if data.conversational:
            row |= render_chat(tokenizer, row["prompt"], texts)
        else:
            row |= {k: v if v.endswith(eos) else v + eos for k, v in texts.items()}
        out.append(row)
    return out


def training_rows(data: DataFile, kind: str, tokenizer, n: int | None = None) -> tuple[list[dict], dict]:
    """The rows an offline method of ``kind`` trains on, from the file's first ``n`` rows, and what they
    are: pairs ``{"id", "question", "prompt", "chosen", "rejected"}``; unpaired rows ``{..., "completion",
    "label"}`` (a pair gives one of each label); SFT rows ``{..., "completion"}`` (a pair's chosen
    completion, an unpaired file's rows labelled true). ``question`` is the rendered prompt too."""
    texts = render(data, tokenizer, n)
    base = [{"id": f"row-{i}", "question": t["prompt"], "prompt": t["prompt"]} for i, t in enumerate(texts)]
    paired = data.type in PAIRED
    if kind == "pairs":
        rows = [{**b, "chosen": t["chosen"], "rejected": t["rejected"]} for b, t in zip(base, texts)]
    elif kind == "unpaired" and paired:
        rows = [
            {**b, "id": f"{b['id']}/{side}", "completion": t[side], "label": side == "chosen"}
            for b, t in zip(base, texts)
            for side in ("chosen", "rejected")
        ]
    elif kind == "unpaired":
        rows = [{**b, "completion": t["completion"], "label": t["label"]} for b, t in zip(base, texts)]
    else:
        take = "chosen" if paired else "completion"
        rows = [{**b, "completion": t[take]} for b, t in zip(base, texts) if t.get("label", True)]
    stats = source_stats(data, len(texts), examples=len(rows))
    return rows, stats | ({"pairs": len(rows)} if kind == "pairs" else {})


def source_stats(data: DataFile, n_rows: int, **counts: int) -> dict:
    """What a record's ``data`` says of rows taken from ``data``: the file, its type and form, the rows
    read, then ``counts`` (the examples or prompts made)."""
    return {
        "source": "file",
        "path": str(data.path),
        "format": data.type,
        "conversational": data.conversational,
        "rows": n_rows,
        **counts,
    }


def prompt_rows(data: DataFile, tokenizer, n: int | None = None) -> tuple[list[dict], dict]:
    """The prompts an online method samples its rollouts from, the file's first ``n`` rows (None: all),
    and what they are. Each row is ``{"id", "question", "prompt", "answer", FILE_ROW}``: ``prompt`` (and
    ``question``) the text the policy is prompted with (a conversational prompt through the chat template
    with the generation prompt, as TRL's ``GRPOTrainer``), ``answer`` the file's ``answer`` column (None
    without one), and under :data:`~oxbench.tasks.rewards.FILE_ROW` what the reward functions get: the
    prompt as the file has it, whether it is conversational, and every other column of the row."""
    texts = render(data, tokenizer, n)
    rows = []
    for i, (row, extra, text) in enumerate(zip(data.rows, data.extra, texts)):
        columns = {k: v for k, v in {**row, **extra}.items() if k != "prompt"}
        file_row = {"prompt": row["prompt"], "conversational": data.conversational, "columns": columns}
        rows.append(
            {
                "id": f"row-{i}",
                "question": text["prompt"],
                "prompt": text["prompt"],
                "answer": columns.get("answer"),
                FILE_ROW: file_row,
            }
        )
    return rows, source_stats(data, len(texts), prompts=len(rows))
