"""``python -m losses``: write ``losses/index.json`` from the live registry (after changing a built-in
loss); ``python -m losses --check``: exit 1 when the committed index differs from the live registry."""

from __future__ import annotations

import sys

from losses.registry import INDEX, build_index, render_index


def main(argv: list[str]) -> int:
    """Regenerate (or with ``--check`` compare) the index; the exit code."""
    index = build_index()
    text = render_index(index)
    if "--check" in argv:
        current = INDEX.read_text(encoding="utf-8") if INDEX.is_file() else ""
        if current != text:
            print(f"{INDEX} is stale: run python -m losses", file=sys.stderr)
            return 1
        return 0
    INDEX.write_text(text, encoding="utf-8")
    print(f"wrote {INDEX}: {len(index['losses'])} losses, sources {index['sources']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
