"""Draft analysis and refinement (Kim et al. 2024, arXiv 2404.09221).

lm.py (the small
neural rescorer and its training), analysis.py (repetition, confidence,
oracle efficiency), compare.py (plain vs refined drafts, timed side by
side), checks.py (the config's `drafts` section); `python -m bpd_jax.drafts`
runs it all. The decoding side is `bpd_jax.decoding.refine`.
"""
