"""How logits become the distribution a decode samples from (`Sampler`).

A value type of the decoding options (`options.DecodeOptions.sampler`):
temperature, then top-k, then top-p, each optional, and how blockwise
sampling proposes. Its numbers are traced arrays inside the compiled
decode (a pytree): one program serves every temperature and cut-off.
Temperature 0 is greedy decoding, which `generate` runs through the argmax
loop itself. The loop that samples is `sampling.py`'s.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp

from bpd_jax.decoding import specs
from bpd_jax.infra import numeric


# How blockwise sampling proposes: drawn from q, or q's most likely token.
PROPOSAL_RULES = ('draw', 'argmax')

# The fields a spec gives, and their types.
_SPEC_KINDS = {'temperature': float, 'top_k': int, 'top_p': float,
               'proposals': str}


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Sampler:
  """How logits become the distribution a decode samples from.

  Attributes:
    temperature: logits are divided by it; 0 is greedy decoding.
    top_k: keep the k most likely tokens (0: all). Ties at the k-th value
      (to 2**-32 of the logits' range) are all kept.
    top_p: keep the fewest most likely tokens whose probability reaches
      top_p (1: all), nucleus sampling; ties at the cut are all kept.
    proposals: static, one of PROPOSAL_RULES: blockwise sampling's
      proposals drawn from the drafter's warped q ('draw') or its most
      likely tokens ('argmax', a point-mass q); see the module docstring.
  """
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0
  proposals: str = dataclasses.field(default='draw',
                                     metadata=dict(static=True))

  @classmethod
  def from_spec(cls, spec: str) -> 'Sampler':
    """Parses 'greedy' or 'temperature=T[,top_k=K][,top_p=P]
    [,proposals=R]' (configs, flags); omitted fields keep their
    defaults."""
    if spec == 'greedy':
      return cls(temperature=0.0)
    return cls(**specs.options(spec, spec, _SPEC_KINDS, 'sampler'))

  @property
  def spec(self) -> str:
    """The sampler as `from_spec` reads it."""
    if self.greedy:
      return 'greedy'
    parts = [f'temperature={self.temperature:g}']
    if self.top_k:
      parts.append(f'top_k={self.top_k}')
    if self.top_p < 1:
      parts.append(f'top_p={self.top_p:g}')
    if self.proposals != 'draw':
      parts.append(f'proposals={self.proposals}')
    return ','.join(parts)

  @property
  def greedy(self) -> bool:
    return self.temperature == 0

  def check(self, vocab_size: int) -> None:
    """Raises ValueError naming a value out of range."""
    if not (numeric.is_finite(self.temperature)
            and self.temperature >= 0):
      raise ValueError(f'temperature={self.temperature!r} must be a finite '
                       f'number >= 0 (0: greedy decoding).')
    if not numeric.is_integer(self.top_k) or not (
        0 <= self.top_k <= vocab_size):
      raise ValueError(f'top_k={self.top_k!r} must be an integer in [0, '
                       f'{vocab_size}], the vocabulary size (0: no cut).')
    if not (numeric.is_finite(self.top_p) and 0 < self.top_p <= 1):
      raise ValueError(f'top_p={self.top_p!r} must be in (0, 1] (1: no '
                       f'cut).')
    if self.proposals not in PROPOSAL_RULES:
      raise ValueError(f'proposals={self.proposals!r} is not one of '
                       f'{PROPOSAL_RULES}.')

  def log_probs(self, logits: jax.Array) -> jax.Array:
    """[..., vocab] logits -> the warped distribution's log-probabilities
    (-inf outside the cuts), normalised. Temperature must be > 0."""
    scaled = logits.astype(jnp.float32) / self.temperature
    # A sampler without cuts skips them (its numbers are traced: a runtime
    # branch).
    cuts = (jnp.asarray(self.top_k) > 0) | (jnp.asarray(self.top_p) < 1)
    return jax.lax.cond(cuts, self._cut, functools.partial(
        jax.nn.log_softmax, axis=-1), scaled)

  def _cut(self, scaled: jax.Array) -> jax.Array:
    """log_probs of scaled logits through the top-k and top-p cuts.

    Each cut is a threshold found by bisection (32 halvings of its range:
    ties within 2**-32 of it are kept), not by sorting the vocabulary: on a
    CPU XLA's sort of a vocabulary costs orders of magnitude more.
    """
    vocab = scaled.shape[-1]
    k = jnp.where(self.top_k > 0, self.top_k, vocab)
    # The k-th largest logit: the highest t with at least k logits >= t.
    kth = _bisect(lambda t: (scaled >= t).sum(-1, keepdims=True) >= k,
                  scaled.min(-1, keepdims=True),
                  scaled.max(-1, keepdims=True))
    log_p = jax.nn.log_softmax(jnp.where(scaled >= kth, scaled, -jnp.inf),
                               axis=-1)
    p = jnp.exp(log_p)
    # Nucleus: the highest probability t whose tokens p >= t hold top_p.
    floor = _bisect(
        lambda t: jnp.where(p >= t, p, 0.0).sum(-1, keepdims=True)
        >= self.top_p,
        jnp.zeros_like(p[..., :1]), p.max(-1, keepdims=True))
    return jax.nn.log_softmax(jnp.where(p >= floor, log_p, -jnp.inf),
                              axis=-1)


def _bisect(holds, low: jax.Array, high: jax.Array,
            steps: int = 32) -> jax.Array:
  """The highest t in [low, high] where `holds(t)` (monotone: true at low,
  false above some point), to (high - low) / 2**steps."""
  def halve(_, bounds):
    low, high = bounds
    middle = (low + high) / 2
    ok = holds(middle)
    return jnp.where(ok, middle, low), jnp.where(ok, high, middle)
  low, high = jax.lax.fori_loop(0, steps, halve, (low, high))
  return jnp.where(holds(high), high, low)
