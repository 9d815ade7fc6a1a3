"""Drafters moved towards proposing head 1's token again, which random
models, prone to repeating themselves, often accept: the tests of exact
decoding then see long accepted blocks as well as rejections."""

import jax
import jax.numpy as jnp
import numpy as np


def scale_heads(model, head_scale):
  """Moves the heads towards proposing head 1's token again (0: always).

  The paper's and sequential heads: their output weights scaled. The draft
  layer: its attention and feed-forward outputs scaled and its input layer
  moved towards passing the base's feature through, so that at 0 it
  estimates the base's next feature by the current one. The block drafter:
  moved towards `repeating_block`; its correction's output, zero when
  made, given random weights scaled by head_scale, so that it acts.
  """
  if model.config.head_layer in ('block', 'block_corrected'):
    if model.config.mixture is None:
      repeating_block(model, head_scale)
    if model.config.head_layer == 'block_corrected':
      w_out = model.heads.correction.w_out
      w_out[...] = head_scale * jax.random.normal(
          jax.random.key(0), w_out[...].shape, w_out[...].dtype)
    return
  if model.config.head_layer != 'autoregressive':
    model.heads.w_out[...] = model.heads.w_out[...] * head_scale
    return
  draft = model.heads.draft
  d_model = model.config.d_model
  kernel = draft.fuse.kernel[...]
  passing = jnp.concatenate([jnp.eye(d_model), jnp.zeros((d_model, d_model))
                             ]).astype(kernel.dtype)
  draft.fuse.kernel[...] = head_scale * kernel + (1 - head_scale) * passing
  draft.attention.out.kernel[...] = draft.attention.out.kernel[...] * head_scale
  draft.down.kernel[...] = draft.down.kernel[...] * head_scale
  if draft.source != 'none':
    out = draft.source_attention.out.kernel
    out[...] = out[...] * head_scale
  if draft.extra_features:  # The first step's input: the top feature.
    kernel = draft.reduce.kernel[...]
    top = jnp.concatenate([jnp.eye(d_model), jnp.zeros(
        (kernel.shape[0] - d_model, d_model))]).astype(kernel.dtype)
    draft.reduce.kernel[...] = head_scale * kernel + (1 - head_scale) * top
    draft.reduce.bias[...] = draft.reduce.bias[...] * head_scale


def repeating_block(model, head_scale):
  """Moves a one-layer block drafter towards proposing its block's first
  token (head 1's) at every position (at 0: always).

  At 0 its context, mask embedding and queries are zero, so every block
  position attends alike to entries whose values are zero but the first
  position's; the value and output projections then map the first
  position's normalised embedding z_a of token a to a state u_a that the
  final norm leaves a multiple of and the vocabulary projection W turns
  into a one-hot of a: u_a with mean 0 solving W^T u_a = e_a, and the
  map M with M z_a = u_a for every a (least squares, exact for a
  vocabulary no larger than d_model - 1).
  """
  (layer,) = model.heads.layers
  d = model.config.d_model
  attention = layer.attention
  dtype = attention.out.kernel[...].dtype
  def blend(param, target):
    """param moved towards target, scaled to its norm (the final norm
    makes the construction's scale free)."""
    norm = jnp.linalg.norm(target)
    if norm > 0:
      target = target * jnp.linalg.norm(param[...]) / norm
    param[...] = head_scale * param[...] + (1 - head_scale) * target.astype(
        dtype)
  blend(model.heads.fuse.kernel, jnp.zeros_like(model.heads.fuse.kernel[...]))
  blend(model.heads.mask, jnp.zeros(d))
  blend(attention.query.kernel, jnp.zeros_like(attention.query.kernel[...]))
  embeddings = model.token_embedding(jnp.arange(model.config.vocab_size))
  z = np.asarray(layer.attention_norm(embeddings)).T  # [d, V]
  w = np.asarray(model._vocab())  # [d, V]  pylint: disable=protected-access
  centre = np.eye(d) - 1.0 / d  # Mean-zero states.
  u = centre @ np.linalg.pinv(w.T @ centre) @ np.eye(w.shape[1])  # [d, V]
  m = u @ np.linalg.pinv(z)
  # The values' and the output's kernels, whose product is M^T (rows:
  # inputs): its rank-r factors, r the attention's width (>= V).
  width = attention.num_heads * attention.head_dim
  left, sizes, right = np.linalg.svd(m.T)
  rank = min(width, d)
  values = np.zeros((d, width))
  values[:, :rank] = left[:, :rank] * sizes[:rank]
  out = np.zeros((width, d))
  out[:rank] = right[:rank]
  blend(attention.key_value.kernel,
        jnp.concatenate([jnp.zeros((d, width)), values], axis=1))
  blend(attention.out.kernel, jnp.asarray(out))
  for linear in (layer.down, *((layer.source_attention.out,)
                                if layer.reads_source else ())):
    blend(linear.kernel, jnp.zeros_like(linear.kernel[...]))
