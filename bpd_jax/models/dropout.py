"""Dropout whose randomness comes with each call."""

import jax
from flax import nnx


def apply(dropout: nnx.Dropout, x: jax.Array,
          rngs: nnx.Rngs | None) -> jax.Array:
  """Dropout in training (rngs given), identity otherwise.

  The randomness comes with each call rather than living in the modules, so
  a training step derives it from (seed, step) alone: resuming reproduces it.
  """
  if rngs is None:
    return x
  return dropout(x, deterministic=False, rngs=rngs)
