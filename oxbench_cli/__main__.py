"""``python -m oxbench_cli``: the ``oxbench`` command."""

from oxbench_cli import main

main()
