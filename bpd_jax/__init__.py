"""bpd_jax: blockwise parallel decoding for JAX/Flax Transformers.

`bpd_jax.load_run(workdir)` opens a trained run from its workdir alone
(`training/runs.py`); `bpd_jax.generate` decodes with it.
"""

__all__ = ['load_run']


def __getattr__(name):
  # Imported on first use: `import bpd_jax.infra.errors` (and every other
  # module) stays free of the training and task libraries.
  if name == 'load_run':
    from bpd_jax.training.runs import load_run
    return load_run
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
