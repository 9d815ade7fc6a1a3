"""A discretized logistic mixture output (PixelCNN++, the Image Transformer).

A categorical output over 256 intensities treats a miss by one level as a
miss by a hundred; a mixture of M logistic distributions over the values,
cut into unit bins, knows that 127 is near 128 (Salimans et al. 2017,
section 2.1; Parmar et al. 2018 use it for images). Here it replaces the
vocabulary projection of a model whose tokens above the special ids are
ordered values (`OutputMixture.first_id` onwards; tasks/images/tokens.py):
the output layer gives each position 3M numbers (component logits, means,
log scales) and `log_probs` turns them into the log-probability of every
vocabulary id. Everything downstream reads those as logits, unchanged:
the loss (cross-entropy against them is the mixture's negative
log-likelihood), every head, sampling, and verification. The argmax of
these logits is the mode of the discretized mixture, so exact blockwise
verification keeps greedy decoding's output; the distance criterion
|proposal - argmax| <= eps measures in value steps.

Values live on [-1, 1]: the n support ids are n equally spaced points
x_j = 2 j / (n - 1) - 1, bin j covering [x_j - h, x_j + h], h = 1 / (n - 1),
the first and last bins reaching to -inf and +inf so that the n
probabilities sum to 1. Means start near 0 (the middle of the support:
for tokens that are residuals from a reference, the reference itself).
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from bpd_jax.infra import numeric

# ml_collections `model` fields (configs/sr_demo.py, celeba_sr.py) -> the
# OutputMixture fields they set.
CONFIG_FIELDS = {'mixture_components': 'components',
                 'mixture_first_id': 'first_id'}
MIN_LOG_SCALE = -7.0  # Scales below e^-7 (a 1/1000 of a bin): no gradient.
FLOOR = 1e-30  # The least mass `log_probs` gives a value (see there).
# The log-probability of ids outside the values (the special ids): the
# floor's, finite (p log p stays 0) and of the size of the values' own
# (a top-2 margin read against the largest |logit|, bench/near_ties.py,
# keeps its meaning).
OUTSIDE = math.log(FLOOR)
INITIAL_SCALE_BINS = 8  # Components start this many bins wide.
# The output layer's kernel starts this much smaller than a linear layer's
# (std 0.01 / sqrt(d_model)): the means start within a few bins of the
# middle value, which for residual targets is the reference image.
INITIAL_KERNEL_SCALE = 0.01


@dataclasses.dataclass(frozen=True)
class OutputMixture:
  """The discretized logistic mixture of a model (TransformerConfig.mixture).

  Attributes:
    components: M, the logistic components.
    first_id: the lowest value's id; ids first_id .. vocab_size - 1 are the
      ordered values, every id below it (pad, eos, bos) has the FLOOR's
      probability (1e-30: never drawn, never an argmax).
  """
  components: int = 5
  first_id: int = 3

  @property
  def num_params(self) -> int:
    """Outputs of the layer that feeds `log_probs`: 3 per component."""
    return 3 * self.components

  def problems(self, vocab_size: int, special_ids: dict[str, int]) -> list[str]:
    """What is wrong with this mixture over that vocabulary."""
    found = []
    if not numeric.is_integer(self.components) or self.components < 1:
      found.append(f'mixture.components={self.components!r} must be an '
                   f'integer >= 1.')
    if not (numeric.is_integer(self.first_id)
            and 0 < self.first_id <= vocab_size - 2):
      found.append(f'mixture.first_id={self.first_id!r} must be an integer '
                   f'in [1, {vocab_size - 2}] (at least two values).')
    else:
      inside = {name: i for name, i in special_ids.items()
                if i >= self.first_id}
      if inside:
        found.append(f'the special ids {inside} lie among the mixture\'s '
                     f'values (ids >= first_id={self.first_id}): they must '
                     f'come before them.')
    return found

  @classmethod
  def pop_from(cls, model_fields: dict) -> 'OutputMixture | None':
    """The mixture a config's flat `model` fields describe, removed from
    it: None where mixture_components is 0 or absent (a softmax over the
    vocabulary)."""
    given = {field: model_fields.pop(key)
             for key, field in CONFIG_FIELDS.items() if key in model_fields}
    if not given.get('components'):
      return None
    return cls(**given)

  def initial_bias(self, vocab_size: int) -> np.ndarray:
    """float32 [3M] the bias the output layer starts from: equal weights,
    means at the middle value (a hair apart, so that the components
    learn apart), scales of INITIAL_SCALE_BINS bins."""
    half = self._half_bin(vocab_size)
    m = self.components
    spread = (np.arange(m) - (m - 1) / 2) * half
    return np.concatenate([np.zeros(m), spread, np.full(
        m, np.log(2 * half * INITIAL_SCALE_BINS))]).astype(np.float32)

  def log_probs(self, params: jax.Array, vocab_size: int) -> jax.Array:
    """[..., 3M] mixture parameters -> [..., vocab_size] log-probabilities
    of every id: the distribution decoding, accuracy and soft targets read.

    params[..., :M] are the component logits, [M:2M] the means (on
    [-1, 1]), [2M:] the log scales. The mixture's CDF is taken once at the
    n - 1 edges between bins (one sigmoid an edge and component, what makes
    it affordable at every position of every head) and a bin's mass is the
    difference across it, in float32 at least. A mass below FLOOR
    (unreachable by decoding's argmax, negligible to sampling) reads as
    FLOOR; the training loss takes `label_log_probs` instead, exact in the
    tails too.
    """
    log_weights, means, log_scales = self._parts(params)
    n, half = vocab_size - self.first_id, self._half_bin(vocab_size)
    edges = jnp.linspace(-1.0 + half, 1.0 - half, n - 1, dtype=means.dtype)
    cdf = jax.nn.sigmoid((edges[:, None] - means[..., None, :])
                         * jnp.exp(-log_scales)[..., None, :])  # [.., n-1, M]
    mixed = jnp.einsum('...em,...m->...e', cdf, jnp.exp(log_weights))
    zero = jnp.zeros_like(mixed[..., :1])
    below = jnp.concatenate([zero, mixed], axis=-1)  # P(X < bin's low edge)
    upto = jnp.concatenate([mixed, zero + 1.0], axis=-1)  # ... high edge.
    values = jnp.log(jnp.maximum(upto - below, FLOOR))
    outside = jnp.full((*values.shape[:-1], self.first_id), OUTSIDE,
                       values.dtype)
    return jnp.concatenate([outside, values], axis=-1)

  def label_log_probs(self, params: jax.Array, labels: jax.Array,
                      vocab_size: int) -> jax.Array:
    """log P(labels) [...] of parameters [..., 3M]: the mixture's
    likelihood of one id each (the training loss), exact in the tails.

    A bin's mass sigmoid(a) - sigmoid(b) (a, b its edges standardized,
    a - b = 2h / s > 0) is sigmoid(a) sigmoid(-b) (1 - e^{b - a}), whose
    logarithm is a sum of log-sigmoids and log(-expm1(b - a)), none of which
    cancels; the first bin's is sigmoid(a), the last one's sigmoid(-b).
    Ids outside the values (padding, which losses mask) read as the first
    value.
    """
    log_weights, means, log_scales = self._parts(params)
    n, half = vocab_size - self.first_id, self._half_bin(vocab_size)
    index = jnp.clip(labels - self.first_id, 0, n - 1)[..., None]
    value = (2.0 * half * index - 1.0).astype(means.dtype)
    inverse = jnp.exp(-log_scales)
    upper = (value + half - means) * inverse
    lower = (value - half - means) * inverse
    below, above = jax.nn.log_sigmoid(upper), jax.nn.log_sigmoid(-lower)
    middle = below + above + jnp.log(-jnp.expm1(-2.0 * half * inverse))
    per_component = jnp.where(index == 0, below,
                              jnp.where(index == n - 1, above, middle))
    return jax.nn.logsumexp(per_component + log_weights, axis=-1)

  def _half_bin(self, vocab_size: int) -> float:
    """h: half a bin's width on [-1, 1] over this vocabulary's values."""
    return 1.0 / (vocab_size - self.first_id - 1)

  def _parts(self, params: jax.Array):
    """(log weights, means, log scales), each [..., M], in float32 at
    least; log scales no lower than MIN_LOG_SCALE."""
    m = self.components
    params = params.astype(jnp.promote_types(params.dtype, jnp.float32))
    return (jax.nn.log_softmax(params[..., :m], axis=-1),
            params[..., m:2 * m],
            jnp.maximum(params[..., 2 * m:], MIN_LOG_SCALE))
