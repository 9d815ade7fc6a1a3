"""Verification criteria: which proposed tokens the scoring model accepts.

Stern et al. 2018, sections 3 and 5: exact verification returns exactly the
greedy output; top-t and distance verification trade quality for longer
accepted blocks. Typical acceptance (Medusa, Cai et al. 2024) accepts what
the scoring model finds likely enough, relative to its entropy. A minimum block size (accept at least l tokens per call) is
a separate option of the decoder and applies with any criterion.

Criteria are frozen dataclasses, hashable, so they can be static arguments
of a jitted decoder.
"""

import abc
import dataclasses

import jax
import jax.numpy as jnp

from bpd_jax.infra import numeric
from bpd_jax.infra import ops


class Criterion(abc.ABC):
  """Decides, position by position, whether a proposal is acceptable."""

  @abc.abstractmethod
  def accepts(self, proposals: jax.Array, logits: jax.Array,
              best: jax.Array | None = None) -> jax.Array:
    """Whether each proposal passes.

    Args:
      proposals: [..., n] proposed token ids.
      logits: [..., n, vocab] the scoring model's logits for the same
        positions (conditioned on the proposals before them).
      best: [..., n] their argmax, where the caller has it already (a
        decoder does): a second argmax over the vocabulary costs as much
        as a good part of a small model's call on a CPU.

    Returns:
      [..., n] bool.
    """

  @property
  @abc.abstractmethod
  def spec(self) -> str:
    """The criterion as `from_spec` reads it, e.g. 'top-k:2'."""


@dataclasses.dataclass(frozen=True)
class Exact(Criterion):
  """Accept a proposal equal to the scoring model's argmax (greedy output)."""

  spec = 'exact'

  def accepts(self, proposals, logits, best=None):
    return proposals == (ops.argmax(logits) if best is None else best)


@dataclasses.dataclass(frozen=True)
class TopK(Criterion):
  """Accept a proposal among the scoring model's `t` highest-scoring tokens.

  Ties are broken as `jax.lax.top_k` breaks them (lower id first), so
  TopK(1) accepts exactly what Exact accepts.
  """
  t: int

  def __post_init__(self):
    if not numeric.is_integer(self.t) or self.t < 1:
      raise ValueError(f'top-k verification needs an integer t >= 1, got '
                       f't={self.t!r}.')
    # A numpy integer as a Python int: one spec, one compilation key.
    object.__setattr__(self, 't', int(self.t))

  @property
  def spec(self):
    return f'top-k:{self.t}'

  def accepts(self, proposals, logits, best=None):
    if self.t > logits.shape[-1]:
      raise ValueError(f'top-k verification with t={self.t} exceeds the '
                       f'vocabulary size {logits.shape[-1]}.')
    _, top = jax.lax.top_k(logits, self.t)
    return jnp.any(top == proposals[..., None], axis=-1)


@dataclasses.dataclass(frozen=True)
class Distance(Criterion):
  """Accept |proposal - argmax| <= eps, for ordinal tokens (pixel values)."""
  eps: float

  def __post_init__(self):
    if not (numeric.is_finite(self.eps) and self.eps >= 0):
      raise ValueError(f'distance verification needs a finite eps >= 0, '
                       f'got eps={self.eps!r}.')

  @property
  def spec(self):
    return f'distance:{self.eps:g}'

  def accepts(self, proposals, logits, best=None):
    best = ops.argmax(logits) if best is None else best
    return jnp.abs(proposals - best) <= self.eps


@dataclasses.dataclass(frozen=True)
class Typical(Criterion):
  """Medusa's typical acceptance: accept x where p(x) > min(eps,
  delta * exp(-H(p))), p the scoring model's distribution (warped, when
  sampling) and H its entropy.

  Approximate: with sampling it does NOT keep the base model's
  distribution (flat distributions accept more, peaked ones less); the
  rejection rule of `sampling.py` does.
  """
  eps: float
  delta: float

  def __post_init__(self):
    if not (numeric.is_finite(self.eps) and 0 < self.eps <= 1):
      raise ValueError(f'typical acceptance needs 0 < eps <= 1, got '
                       f'eps={self.eps!r}.')
    if not (numeric.is_finite(self.delta) and self.delta > 0):
      raise ValueError(f'typical acceptance needs a finite delta > 0, got '
                       f'delta={self.delta!r}.')

  @property
  def spec(self):
    return f'typical:{self.eps:g},{self.delta:g}'

  def accepts(self, proposals, logits, best=None):
    del best
    log_p = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    p = jnp.exp(log_p)
    entropy = -jnp.sum(jnp.where(p > 0, p * log_p, 0.0), axis=-1)
    threshold = jnp.minimum(self.eps, self.delta * jnp.exp(-entropy))
    p_x = jnp.take_along_axis(p, proposals[..., None], axis=-1)[..., 0]
    return p_x > threshold


def from_spec(spec: str) -> Criterion:
  """Parses 'exact', 'top-k:T', 'distance:EPS' or 'typical:EPS,DELTA'
  (config files, flags)."""
  name, _, value = spec.partition(':')
  try:
    if name == 'exact' and not value:
      return Exact()
    if name == 'top-k':
      return TopK(int(value))
    if name == 'distance':
      return Distance(float(value))
    if name == 'typical':
      eps, delta = value.split(',')
      return Typical(float(eps), float(delta))
  except ValueError as error:
    raise ValueError(f'criterion {spec!r}: {error}') from error
  raise ValueError(f"criterion {spec!r} is not 'exact', 'top-k:T', "
                   f"'distance:EPS' or 'typical:EPS,DELTA'.")


def accepted_count(accepts: jax.Array, min_accepted: int = 0) -> jax.Array:
  """Length of the accepted prefix, the first `min_accepted` taken as passed.

  Args:
    accepts: [..., n] bool, per proposal.
    min_accepted: leading proposals taken without verification; the ones
      after them are verified as usual. (The paper's minimum block size l is
      min_accepted + 1: the scoring model's own token always follows the
      accepted proposals.)

  Returns:
    [...] int32 in [min(min_accepted, n), n].
  """
  n = accepts.shape[-1]
  position = jnp.arange(n, dtype=jnp.int32)
  passed = accepts | (position < min_accepted)
  # The first failing position, or n: one plain reduction (a cumulative
  # product becomes a slow reduce-window on XLA-CPU).
  return jnp.min(jnp.where(passed, n, position), axis=-1)
