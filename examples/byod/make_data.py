"""Write this example's data files, in TRL's standard formats: ``pairs.jsonl`` (preference: prompt,
chosen, rejected) and ``unpaired.jsonl`` (unpaired preference: prompt, completion, label).

The rows are arith problems of the quickstart's task in the tiny models' prompt format; the chosen
answer ends with the graded ``#### N`` line, the rejected one with the sentence the format base
prefers (``The answer is N.``): a preference for the format, as the quickstart's story has it.
``python examples/byod/make_data.py`` rewrites both files byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path

from oxbench.tasks import arith

HERE = Path(__file__).resolve().parent


def rows(n: int = 64) -> list[dict]:
    out = []
    for r in arith.generate("train", n, seed=0, n_ops=2, max_operand=40):
        working, final = r["answer"].rsplit("\n", 1)
        sentence = f"{working}\nThe answer is {final.removeprefix('#### ')}."
        out.append(
            {"prompt": f"Question: {r['question']}\nAnswer: ", "chosen": r["answer"], "rejected": sentence}
        )
    return out


def files() -> dict[str, str]:
    """Each file's name and text."""
    pairs = rows()
    unpaired = [
        {"prompt": p["prompt"], "completion": p[side], "label": side == "chosen"}
        for p in pairs
        for side in ("chosen", "rejected")
    ]
    return {
        name: "".join(json.dumps(x) + "\n" for x in items)
        for name, items in (("pairs.jsonl", pairs), ("unpaired.jsonl", unpaired))
    }


def main() -> None:
    for name, text in files().items():
        (HERE / name).write_text(text)


if __name__ == "__main__":
    main()
