"""Draft analysis and refinement (Kim et al. 2024, arXiv 2404.09221).

`python -m bpd_jax.drafts` (__main__.py) runs `report.run`, whose three
steps are library functions: rescorer_training.py (the n-gram model and
the small neural rescorer, lm.py, built on a corpus), analysis.py
(repetition, confidence, oracle efficiency on the greedy outputs) and
compare.py (plain vs refined drafts, timed side by side); checks.py checks
the config's `drafts` section, plots.py draws the figure. The decoding
side is `bpd_jax.decoding.refine`.
"""
