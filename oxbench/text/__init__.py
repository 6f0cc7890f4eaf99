"""Model-text primitives, the bottom of the ``oxbench`` package: how a prompt and an answer are written
(:mod:`.formatting`), tokenised, collated and scored (:mod:`.batching`: token log-probs of a response),
and generated (:mod:`.generation`: greedy and sampled, with exact ids and behaviour log-probs).
``data/`` (self-play), ``engine/`` (training, rollouts) and ``eval/`` build on these and never on
each other for them.
"""
