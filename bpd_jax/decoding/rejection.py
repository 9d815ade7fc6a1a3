"""Speculative sampling's rule, one proposal at a time (Leviathan et al.
2023; Chen et al. 2023): a token drawn from a distribution, the test that
accepts a proposal x drawn from q with probability min(1, p(x) / q(x)),
the residual a rejection draws from, and the point mass that is a
deterministic proposal's q. The chain (`sampling.py`) and the tree
(`tree_sampling.py`) verifiers are made of them.
"""

import jax
import jax.numpy as jnp


def draw(keys: jax.Array, log_probs: jax.Array) -> jax.Array:
  """One token per distribution: keys [batch], log_probs [batch, ...,
  vocab] -> [batch, ...] int32.

  By the inverse of the cumulative distribution: one uniform draw per
  token. jax.random.categorical's Gumbel noise needs one per vocabulary
  entry, which costs about twice as much on a CPU.
  """
  probs = jnp.exp(log_probs)
  cdf = jnp.cumsum(probs, axis=-1)
  uniform = jax.vmap(lambda key: jax.random.uniform(key, probs.shape[1:-1]))(
      keys)
  # In (0, total]: the first token whose cumulative mass reaches it has
  # positive probability.
  target = (1.0 - uniform)[..., None] * cdf[..., -1:]
  drawn = jnp.sum(cdf < target, axis=-1)
  return jnp.minimum(drawn, probs.shape[-1] - 1).astype(jnp.int32)


def point_mass(tokens: jax.Array, vocab_size: int) -> jax.Array:
  """[..., vocab] the log-distribution of a point mass at each token
  [...]: 0 there, -inf elsewhere."""
  return jnp.where(jax.nn.one_hot(tokens, vocab_size, dtype=bool), 0.0,
                   -jnp.inf)


def accepted_proposals(log_p_x, log_q_x, uniform) -> jax.Array:
  """Speculative sampling's test, per proposal: accept x with probability
  min(1, p(x) / q(x)).

  Args:
    log_p_x: [..., n] log p of each proposal under the warped base.
    log_q_x: [..., n] log q of it under the head it was drawn from.
    uniform: [..., n] uniform draws in [0, 1).

  Returns:
    [..., n] bool.
  """
  return jnp.log(uniform) < log_p_x - log_q_x


def residual_log_probs(log_p, log_q) -> jax.Array:
  """log of max(0, p - q), normalised: where a rejected proposal's position
  draws its token. Where p <= q everywhere (no rejection possible) p."""
  residual = jnp.maximum(jnp.exp(log_p) - jnp.exp(log_q), 0.0)
  total = residual.sum(axis=-1, keepdims=True)
  return jnp.where(total > 0, jnp.log(residual / jnp.where(total > 0, total,
                                                           1.0)), log_p)
