"""The command line's application, its consoles, and the one-line failure every bad input gets."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _package_version

import typer
from rich.console import Console
from rich.text import Text

# Heavy libraries (torch, transformers, the engine) are imported only where a command trains or loads a
# loss: --help, losses, --plan and every bad-input error read the loss registry's index
# (losses.info, losses/index.json) and answer without torch (tests/test_cli_fast.py).

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="oxbench: a controlled benchmark harness for LLM post-training algorithms.",
)
# markup=False: every message is literal text. Errors carry torch's "[rank0]:" prefixes, bracketed
# paths and whatever a plugin raised; as markup they would be restyled or end the grid (MarkupError).
out_console = Console(width=max(120, Console().width), markup=False, highlight=False)
err_console = Console(stderr=True, markup=False, highlight=False)
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(32), 127) if chr(c) not in "\n\t"}


def literal(text) -> str:
    """``text`` as printable characters: control characters (an ANSI escape, a carriage return that
    would overwrite the line) shown as ``\\xNN``."""
    return str(text).translate(_CONTROL)


def tagged(tag: str, style: str, msg) -> Text:
    """``tag`` in ``style``, then ``msg`` as literal text."""
    return Text.assemble((tag, style), " ", literal(msg))


def fail(msg: str, code: int = 2):
    err_console.print(tagged("error:", "red", msg), soft_wrap=True)
    raise typer.Exit(code)


def _load_plugins(plugins: list[str]) -> None:
    if not plugins:
        return
    import losses
    from oxbench.plugins import load_plugins

    try:
        load_plugins(plugins)
    except losses.LossError as exc:
        fail(str(exc))


def version() -> str:
    """oxbench's version, as installed (``unknown`` where it runs from a tree never installed)."""
    try:
        return _package_version("oxbench")
    except PackageNotFoundError:
        return "unknown"


def _print_version(given: bool) -> None:
    if given:
        out_console.print(f"oxbench {version()}")
        raise typer.Exit()


@app.callback()
def _options(
    _version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print oxbench's version and exit."
    ),
) -> None:
    """The options of ``oxbench`` itself, before a command."""


def scores(rec: dict) -> str:
    """A finished record's accuracy in one phrase: strict, then flexible and verified-flexible where the
    record has them, and the split when it is not the test split ("accuracy 0.0%, flexible 59.3%,
    verified-flexible 58.3% (validation)"): a testbed graded flexibly is not read off strict alone."""
    m = rec.get("metrics") or {}
    parts = [f"accuracy {100 * m['accuracy']:.1f}%"]
    for key, label in (
        ("accuracy_flexible", "flexible"),
        ("accuracy_verified_flexible", "verified-flexible"),
    ):
        if isinstance(m.get(key), int | float) and not isinstance(m.get(key), bool):
            parts.append(f"{label} {100 * m[key]:.1f}%")
    split = ((rec.get("config") or {}).get("eval") or {}).get("split", "test")
    return ", ".join(parts) + ("" if split == "test" else f" ({split})")
