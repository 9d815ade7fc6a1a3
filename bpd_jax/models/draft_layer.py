"""An autoregressive draft layer over the base model's features (after EAGLE).

One small Transformer decoder layer drafts the tokens after the scoring
model's, one at a time. At decoder position s it reads the base model's
output feature f_s (the state that predicted token s + 1) fused with the
embedding of token s + 1, attends causally to its own entries at earlier
positions (its own key/value cache), and outputs g_s, an estimate of the
base's next feature f_{s+1}: through the base's vocabulary projection g_s
gives the token at s + 2.

Drafting after the last accepted position s*: the entries of every newly
accepted position are written from the base's features (one `extend` over
the positions the base just scored), g_{s*} gives the first proposal; each
next step writes the entry (g, proposed token) at the next position and
reads the next proposal from it. Entries past the accepted length are
stale, masked by position and overwritten by the next call's, exactly as
the base's own cache handles rejected proposals.

Training is teacher-forced on the true tokens and unrolled as decoding
runs (`unroll`): at every position, step j reads the base's entries up to
that position and its own entries of the steps before, so head j + 1
learns exactly what it drafts. Besides each step's cross-entropy, g learns
the base's next feature (a smooth-L1 regression, as EAGLE trains), which
keeps the features its later steps read close to the base's.
"""

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from bpd_jax.models import attention


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DraftCache:
  """The draft layer's keys and values: [batch, positions, heads, head_dim]
  (the base cache's positions)."""
  attention: attention.KVCache


class DraftLayer(nnx.Module):
  """fuse([f; e]) -> pre-norm causal self-attention -> pre-norm FFN -> norm."""

  def __init__(self, d_model: int, num_heads: int, hidden: int, *, dtype,
               param_dtype, rngs: nnx.Rngs):
    """Creates the layer.

    Args:
      d_model: width of the base model's features.
      num_heads: attention heads (d_model must divide by it).
      hidden: the feed-forward layer's hidden width.
      dtype: computation dtype (None: from inputs and params).
      param_dtype: parameter dtype.
      rngs: initialisation randomness.
    """
    linear = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    norm = lambda: nnx.LayerNorm(d_model, epsilon=1e-6, dtype=dtype,
                                 param_dtype=param_dtype, rngs=rngs)
    self.num_heads = num_heads
    self.head_dim = d_model // num_heads
    self.fuse = nnx.Linear(2 * d_model, d_model, **linear)
    self.attention_norm = norm()
    self.attention = attention.SelfAttention(d_model, num_heads, **linear)
    self.ffn_norm = norm()
    self.up = nnx.Linear(d_model, hidden, **linear)
    self.down = nnx.Linear(hidden, d_model, **linear)
    self.out_norm = norm()

  def _apply(self, features, next_embeds, attend):
    x = self.fuse(jnp.concatenate(
        [features, next_embeds.astype(features.dtype)], axis=-1))
    x = x + attend(self.attention_norm(x))
    x = x + self.down(jax.nn.relu(self.up(self.ffn_norm(x))))
    return self.out_norm(x)

  def __call__(self, features: jax.Array, next_embeds: jax.Array) -> jax.Array:
    """Teacher-forced over whole sequences (training, analysis).

    Args:
      features: [batch, T, d_model] the base's outputs f_0 .. f_{T-1}.
      next_embeds: [batch, T, d_model] embeddings of tokens 1 .. T, the
        token after each position.

    Returns:
      [batch, T, d_model] g: g_s estimates f_{s+1}.
    """
    batch, length = features.shape[:2]
    positions = jnp.broadcast_to(jnp.arange(length), (batch, length))
    mask = attention.causal_mask(positions, length)
    return self._apply(features, next_embeds,
                       lambda y: self.attention(y, mask))

  def unroll(self, features: jax.Array, next_embeds: jax.Array) -> jax.Array:
    """Every drafting step at every position, teacher-forced on the tokens:
    what decoding computes, for training and analysis.

    At position t (the last accepted one), step 1 reads the base's entries
    at positions <= t; step j > 1 writes the entry (g of step j - 1, the
    embedding of token t + j) and attends to the base's entries <= t and
    its own entries of steps 2..j at t, exactly the cache a decode holds
    there. Each step's own keys are one per position, so they join the
    causal scores as extra columns instead of a [T, T] matrix a step.

    Args:
      features: [batch, T, d_model] the base's outputs f_0 .. f_{T-1}.
      next_embeds: [batch, T, S, d_model]: at [:, t, j - 1] the embedding
        of token t + j, read by step j (S steps).

    Returns:
      [batch, T, S, d_model]: g of step j at [:, t, j - 1], the estimate of
      f_{t+j} (the state giving token t + j + 1).
    """
    batch, length = features.shape[:2]
    positions = jnp.broadcast_to(jnp.arange(length), (batch, length))
    causal = attention.causal_mask(positions, length)  # [b, 1, T, T]
    scale = 1.0 / jnp.sqrt(jnp.asarray(self.head_dim, features.dtype))
    base = {}

    def attend_base(y):
      q, base['k'], base['v'] = self.attention.project(y)
      out = jax.nn.dot_product_attention(q, base['k'], base['v'],
                                         mask=causal)
      return self.attention.output(out)

    states = [self._apply(features, next_embeds[:, :, 0], attend_base)]
    own_keys, own_values = [], []

    def attend_own(y):
      q, k, v = self.attention.project(y)
      own_keys.append(k)
      own_values.append(v)
      # [b, heads, T, T] against the base, [b, heads, T, j] against the
      # step's own entries at the same position.
      scores_base = jnp.einsum('bthd,bshd->bhts', q, base['k']) * scale
      scores_base = jnp.where(causal, scores_base, -jnp.inf)
      scores_own = jnp.stack([jnp.einsum('bthd,bthd->bht', q, key)
                              for key in own_keys], axis=-1) * scale
      weights = jax.nn.softmax(
          jnp.concatenate([scores_base, scores_own], axis=-1), axis=-1)
      out = (jnp.einsum('bhts,bshd->bthd', weights[..., :length], base['v'])
             + jnp.einsum('bhtj,jbthd->bthd', weights[..., length:],
                          jnp.stack(own_values)))
      return self.attention.output(out)

    for step in range(1, next_embeds.shape[2]):
      states.append(self._apply(states[-1], next_embeds[:, :, step],
                                attend_own))
    return jnp.stack(states, axis=2)

  def init_cache(self, batch: int, positions: int, dtype) -> DraftCache:
    """An empty cache of `positions` positions per example."""
    return DraftCache(attention.KVCache.zeros(batch, positions,
                                              self.num_heads, self.head_dim,
                                              dtype))

  def extend(self, cache: DraftCache, features: jax.Array,
             next_embeds: jax.Array, start: jax.Array
             ) -> tuple[jax.Array, DraftCache]:
    """Writes n entries per example at start .. start + n - 1, attends.

    Args:
      cache: from `init_cache` or a previous `extend`.
      features: [batch, n, d_model] the features at those positions (the
        base's, or the layer's own g while drafting).
      next_embeds: [batch, n, d_model] embeddings of the token after each.
      start: [batch] absolute position of the first entry.

    Returns:
      ([batch, n, d_model] g at those positions, updated cache).
    """
    entries = {}

    def attend(y):
      out, entries['cache'] = self.attention.extend(y, cache.attention, start)
      return out

    out = self._apply(features, next_embeds, attend)
    return out, DraftCache(entries['cache'])
