"""A block drafter: the whole draft in one pass from the base's features
(the paper's heads in their 2026 form: DFlash, Chen, Liang and Liu 2026).

After the last accepted position t, the block is head 1's token (the base's
own, at position t + 1) followed by k - 1 copies of a learned mask
embedding at t + 2 .. t + k. L small Transformer layers (`block_layers`)
run over the block at once, its positions attending to each other both
ways, and every layer's keys and values also hold the base's features at
the accepted positions <= t ("KV injection"): the outputs of the base's top
layer and of `draft_feature_layers` (shallow to deep), concatenated,
projected and normalised into one context feature a position, which each
layer projects with its own key/value weights. Through the base's shared
vocabulary projection, block position j gives head j + 1's token: the k - 1
proposals of one pass, whose cost does not grow with serial steps.

Positions are rotary (relative) inside the drafter's attention, whatever
the base's own scheme. An encoder-decoder's source is read through the
base's top decoder layer's source keys and values (`draft_source='base'`).

Decoding keeps the context entries in the drafter's own cache: each call
projects the features of the positions the base just scored and writes
them at their positions; entries past the accepted length are stale,
masked by position (a block after position t sees the entries <= t) and
overwritten by the next call's, as the base's cache handles rejected
proposals.

Training (on a frozen base, learning its distribution) runs one block a
chosen position (`train.head_position_fraction` of each row's positions,
the "anchors"), every block in one batched pass: its context is the
features at positions <= its anchor, and half the blocks are shorter than
num_proposal_heads (`training_lengths`), so that one drafter serves every
k up to it (a block of k positions is what decoding at k runs). The heads'
loss weights may fall with their distance (`train.head_loss_decay`).
"""

import jax
import jax.numpy as jnp
from flax import nnx

from bpd_jax.infra import ops
from bpd_jax.models import attention
from bpd_jax.models import rotary as rotary_lib
from bpd_jax.models.drafters import base

T = 'model'  # The mesh axis the 'tensor' rules split over.


class BlockLayer(nnx.Module):
  """Block attention (with the injected context) -> [source attention] ->
  FFN, each sublayer pre-norm with a residual."""

  def __init__(self, config, rotary: rotary_lib.Rotary, *,
               rngs: nnx.Rngs):
    d_model = config.d_model
    linear = dict(dtype=jnp.dtype(config.dtype),
                  param_dtype=jnp.dtype(config.param_dtype), rngs=rngs)
    norm = lambda: nnx.LayerNorm(d_model, epsilon=1e-6, **linear)
    self.attention_norm = norm()
    self.attention = attention.BlockAttention(
        d_model, config.num_heads, head_dim=config.attention_head_dim,
        rotary=rotary, **linear)
    self.reads_source = config.draft_source == 'base'
    if self.reads_source:
      self.source_norm = norm()
      self.source_attention = attention.CrossAttention(
          d_model, config.num_heads, head_dim=config.attention_head_dim,
          num_kv_heads=config.kv_heads, own_memory=False, **linear)
    self.ffn_norm = norm()
    self.up = nnx.Linear(d_model, config.head_hidden or config.d_ff,
                         **linear)
    self.down = nnx.Linear(config.head_hidden or config.d_ff, d_model,
                           **linear)

  def __call__(self, x, positions, context, visible, block_valid, source):
    """[b, a, n, d_model] blocks -> the same; arguments as
    `BlockAttention.__call__`'s, and the source (or None)."""
    x = x + self.attention(self.attention_norm(x), positions, context,
                           visible, block_valid)
    if self.reads_source:
      flat = self.source_norm(x).reshape(x.shape[0], -1, x.shape[-1])
      x = x + self.source_attention(flat, source.memory,
                                    source.valid).reshape(x.shape)
    return x + self.down(jax.nn.relu(self.up(self.ffn_norm(x))))


class BlockDrafter(base.Drafter):
  """fuse(features) -> L `BlockLayer`s over [token, mask, ..., mask] ->
  norm; heads 2..k are block positions 1..k-1."""
  reads_tokens = True
  source_kinds = ('none', 'base')
  reads_features = True
  tensor_rules = (
      (r'layers/\d+/(attention/(query|key_value)|source_attention/query|up)'
       r'/(kernel|bias)', (..., T)),
      (r'layers/\d+/(attention|source_attention)/out/kernel', (T, None)),
      (r'layers/\d+/down/kernel', (T, None)),
  )
  cache_rules = ((r'\d+/(key|value)', (None, None, T, None)),)

  @classmethod
  def problems(cls, config):
    if config.attention_head_dim % 2:
      return [f'the block drafter\'s attention has rotary positions: '
              f'head_dim={config.attention_head_dim} must be even.']
    return []

  def __init__(self, config, *, rngs: nnx.Rngs):
    d_model = config.d_model
    linear = dict(dtype=jnp.dtype(config.dtype),
                  param_dtype=jnp.dtype(config.param_dtype), rngs=rngs)
    self.num_heads = config.num_proposal_heads
    self.source_kind = config.draft_source
    features = (1 + len(config.draft_feature_layers)) * d_model
    self.fuse = nnx.Linear(features, d_model, use_bias=False, **linear)
    self.fuse_norm = nnx.LayerNorm(d_model, epsilon=1e-6, **linear)
    # At the scale of a decoder input embedding.
    self.mask = nnx.Param(nnx.initializers.normal(
        config.embedding_scale * d_model ** -0.5)(
            rngs.params(), (d_model,), jnp.dtype(config.param_dtype)))
    rotary = rotary_lib.Rotary(config.attention_head_dim, config.rope_theta,
                               config.rope_scaling)
    self.layers = nnx.List([BlockLayer(config, rotary, rngs=rngs)
                            for _ in range(config.block_layers)])
    self.out_norm = nnx.LayerNorm(d_model, epsilon=1e-6, **linear)

  def context(self, features: jax.Array) -> jax.Array:
    """[..., F] the base's features -> [..., d_model] the context feature
    every layer's keys and values are projected from."""
    return self.fuse_norm(self.fuse(features))

  def run(self, anchors: jax.Array, first_position: jax.Array, n: int,
          entries, visible: jax.Array, block_valid, source, embed
          ) -> jax.Array:
    """The blocks' outputs.

    Args:
      anchors: [b, a] each block's first token (head 1's).
      first_position: [b, a] its absolute position.
      n: positions a block.
      entries: one KVCache of context entries [b, S, heads, head_dim] a
        layer.
      visible: [b, a, S] bool, the entries each block sees.
      block_valid: [b, a, n] bool or None (all), as `BlockAttention`'s.
      source: the source (or None).
      embed: the base's token embedding.

    Returns:
      [b, a, n, d_model] the normalised states of every block position.
    """
    first = embed(anchors)[:, :, None, :]
    masks = jnp.broadcast_to(self.mask[...].astype(first.dtype),
                             first.shape[:2] + (n - 1, first.shape[-1]))
    x = jnp.concatenate([first, masks], axis=2)
    positions = first_position[..., None] + jnp.arange(n)
    for layer, context in zip(self.layers, entries):
      x = layer(x, positions, context, visible, block_valid, source)
    return self.out_norm(x)

  def states(self, view, first, count, rows=None):
    batch, length = view.hidden.shape[:2]
    if rows is None:
      rows = jnp.broadcast_to(jnp.arange(length), (batch, length))
    if view.next_tokens is None:
      raise ValueError('the block drafter reads head 1\'s token after each '
                       'position: pass next_tokens.')
    n = first + count
    head1 = jnp.take_along_axis(view.hidden, rows[..., None], axis=1)
    if n == 1:
      return head1[..., None, :]
    context = self.context(view.features)
    positions = jnp.broadcast_to(jnp.arange(length), (batch, length))
    entries = [layer.attention.entries(context, positions)
               for layer in self.layers]
    anchors = jnp.take_along_axis(view.next_tokens[..., 0], rows, axis=1)
    visible = jnp.arange(length)[None, None, :] <= rows[..., None]
    block_valid = None
    if view.block_lengths is not None:
      block_valid = jnp.arange(n) < view.block_lengths[..., None]
    out = self.run(anchors, rows + 1, n, entries, visible, block_valid,
                   view.source, view.embed)
    states = jnp.concatenate([head1[:, :, None], out[:, :, 1:]], axis=2)
    return states[:, :, first:]

  def training_lengths(self, key, shape):
    """Half the blocks num_proposal_heads long, the others of a length
    drawn uniformly from 2 .. num_proposal_heads - 1: every block size k
    that decoding may run is trained, the longest most."""
    full = self.num_heads
    if full <= 2:
      return None
    shorter = jax.random.randint(jax.random.fold_in(key, 1), shape, 2, full)
    return jnp.where(jax.random.bernoulli(key, 0.5, shape), full, shorter)

  def init_cache(self, batch, positions, dtype, encoded=None):
    del encoded
    return tuple(attention.KVCache.zeros(
        batch, positions, layer.attention.num_heads,
        layer.attention.head_dim, dtype) for layer in self.layers)

  def proposal_states(self, view, k):
    scored = view.start[:, None] + jnp.arange(view.features.shape[1])
    context = self.context(view.features)
    entries = []
    for layer, cache in zip(self.layers, view.cache):
      new = layer.attention.entries(context, scored)
      entries.append(attention.KVCache(
          ops.write_at(cache.key, new.key.astype(cache.key.dtype),
                       view.start),
          ops.write_at(cache.value, new.value.astype(cache.value.dtype),
                       view.start)))
    accepted = view.start + view.last  # The last accepted position.
    visible = (jnp.arange(view.cache[0].key.shape[1])[None, :]
               <= accepted[:, None])[:, None]
    anchors = ops.take_at(view.next_tokens, view.last)[:, None]
    out = self.run(anchors, (accepted + 1)[:, None], k, entries, visible,
                   None, view.source, view.embed)
    return out[:, 0, 1:], tuple(entries)


class CorrectedBlockDrafter(BlockDrafter):
  """The block drafter with a sequential correction (after DSpark's
  semi-autoregressive head): block position j's state s_j, then
  c_j = s_j + FFN([s_j; e(x_{j-1})]), x_{j-1} the token chosen at the
  position before (head 1's at the first): one small step a head, so
  that each proposal knows the one before it. Recurrent
  (`correction_recurrent`), c_j = s_j + FFN([s_j; e(x_{j-1}); c_{j-1}])
  (c_0 = 0): through the corrected state before, each head reads the
  whole draft so far, as a draft layer's step does. One feed-forward
  layer (`correction`, head_hidden units) serves every position; the
  block pass stays one pass."""
  dependent = True
  tensor_rules = BlockDrafter.tensor_rules + (
      (r'correction/(w_in|b_in)', (..., T)),
      (r'correction/w_out', (T, None)),
  )

  def __init__(self, config, *, rngs: nnx.Rngs):
    super().__init__(config, rngs=rngs)
    self.correction = Correction(config.d_model,
                                 config.head_hidden or config.d_ff,
                                 jnp.dtype(config.param_dtype), rngs,
                                 carries_state=config.correction_recurrent)

  def states(self, view, first, count, rows=None):
    states = super().states(view, 0, first + count, rows)
    if first + count == 1:
      return states[:, :, first:]
    batch, length = view.hidden.shape[:2]
    if rows is None:
      rows = jnp.broadcast_to(jnp.arange(length), (batch, length))
    needed = first + count - 1
    tokens = jnp.take_along_axis(view.next_tokens[..., :needed],
                                 rows[..., None], axis=1)
    previous = view.embed(tokens)  # [b, n, needed, d]: x_0 .. x_{j-1}.
    corrected = [states[:, :, 0]]
    carried = jnp.zeros_like(states[:, :, 0])
    for index in range(needed):
      token = (previous[:, :, index] if view.feed is None or index == 0
               else view.feed(index, corrected[-1]))
      corrected.append(self.correction(states[:, :, index + 1], token,
                                       carried))
      carried = corrected[-1]
    return jnp.stack(corrected, axis=2)[:, :, first:]

  def draft_tokens(self, view, choose, k):
    states, cache = self.proposal_states(view, k)
    previous = ops.take_at(view.next_tokens, view.last)
    proposals, logits = [], []
    state = jnp.zeros_like(states[:, 0])
    for index in range(k - 1):
      state = self.correction(states[:, index], view.embed(previous), state)
      logits.append(view.project(state))
      previous = choose(index, logits[-1])
      proposals.append(previous)
    return jnp.stack(proposals, axis=1), jnp.stack(logits, axis=1), cache

  def draft_tree(self, view, grow, depth):
    # The block's states come from one pass; a node's children read its
    # token (and, recurrent, its corrected state) through the correction.
    states, cache = self.proposal_states(view, depth + 1)
    tokens = ops.take_at(view.next_tokens, view.last)[:, None]
    carried = jnp.zeros_like(states[:, :1])  # [batch, W, d_model]
    for level in range(depth):
      embeds = view.embed(tokens)  # [batch, W, d_model]
      corrected = self.correction(
          jnp.broadcast_to(states[:, level, None], embeds.shape), embeds,
          carried)
      tokens, parents = grow(level, view.project(corrected))
      # A child carries the corrected state that drafted it: its parent's.
      carried = jnp.take_along_axis(corrected, parents[..., None], axis=1)
    return cache


class Correction(nnx.Module):
  """s + FFN([s; e]) or, carrying state, s + FFN([s; e; c]): a state
  corrected by the embedding of the token before it and the corrected
  state before it (w_in [2 or 3 * d_model, hidden], w_out [hidden,
  d_model])."""

  def __init__(self, d_model: int, hidden: int, param_dtype,
               rngs: nnx.Rngs, carries_state: bool = False):
    init = nnx.initializers.lecun_normal()
    self.carries_state = carries_state
    inputs = (3 if carries_state else 2) * d_model
    self.w_in = nnx.Param(init(rngs.params(), (inputs, hidden),
                               param_dtype))
    self.b_in = nnx.Param(jnp.zeros((hidden,), param_dtype))
    # Zero: the correction starts as the block drafter's own states.
    self.w_out = nnx.Param(jnp.zeros((hidden, d_model), param_dtype))
    self.b_out = nnx.Param(jnp.zeros((d_model,), param_dtype))

  def __call__(self, state: jax.Array, previous: jax.Array,
               carried: jax.Array) -> jax.Array:
    """`carried`: the corrected state before (zeros at the first step),
    read only when carrying state."""
    parts = [state, previous.astype(state.dtype)]
    if self.carries_state:
      parts.append(carried.astype(state.dtype))
    x = jnp.concatenate(parts, axis=-1)
    hidden = jax.nn.relu(x @ self.w_in[...].astype(state.dtype)
                         + self.b_in[...].astype(state.dtype))
    return state + (hidden @ self.w_out[...].astype(state.dtype)
                    + self.b_out[...].astype(state.dtype))
