"""The grid layer: a study's spec and its expansion into cells (:mod:`.spec`), the cell that runs
one configuration to its record (:mod:`.runner`, :mod:`.cell`), the processes and executors that run
many (:mod:`.worker`, :mod:`.executors`), and the records on disk (:mod:`.runs`, :mod:`.record`).

Nothing here is imported by the engine below it; the CLI (``oxbench_cli``) sits above it.
"""
