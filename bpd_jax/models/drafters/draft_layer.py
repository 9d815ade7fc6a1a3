"""An autoregressive draft layer over the base model's features (after EAGLE).

One small Transformer decoder layer drafts the tokens after the scoring
model's, one at a time. At decoder position s it reads the base model's
output feature f_s (the state that predicted token s + 1) fused with the
embedding of token s + 1, attends causally to its own entries at earlier
positions (its own key/value cache), and outputs g_s, an estimate of the
base's next feature f_{s+1}: through the base's vocabulary projection g_s
gives the token at s + 2.

What it reads beyond that, each a `TransformerConfig` field:
- the source (`draft_source`, encoder-decoders): a cross-attention over
  the encoder output, either through the base's own top-layer source keys
  and values ('base': the cache already holds them, the layer adds a query
  and an output projection) or its own projection of the encoder output
  ('own': computed once per source, kept in its cache). In translation the
  words after the next one come from the source, which without it only
  the base's cross-attention sees.
- lower decoder layers (`draft_feature_layers`, after EAGLE-3): the
  outputs of those layers, normalised and fused with the top feature into
  the first step's input (`base_features`); later steps read the layer's
  own output in their place.

Drafting after the last accepted position s*: the entries of every newly
accepted position are written from the base's features (one `extend` over
the positions the base just scored), g_{s*} gives the first proposal; each
next step writes the entry (g, proposed token) at the next position and
reads the next proposal from it. Entries past the accepted length are
stale, masked by position and overwritten by the next call's, exactly as
the base's own cache handles rejected proposals.

Training is unrolled as decoding runs (`DraftLayer.unroll`): at every
position, step j reads the base's entries up to that position and its own
entries of the steps before, so head j + 1 learns exactly what it drafts.
The tokens the steps read are the true ones (teacher forcing) or, with a
`feed`, the layer's own drafts (training-time test). Besides each step's
cross-entropy, g learns the base's next feature (`feature_loss`, a
smooth-L1 regression, as EAGLE trains), which keeps the features its
later steps read close to the base's.
"""

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from bpd_jax.infra import ops
from bpd_jax.models import attention
from bpd_jax.models.drafters import base

T = 'model'  # The mesh axis the 'tensor' rules split over.


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DraftCache:
  """The draft layer's state in a decode.

  Attributes:
    attention: its self-attention keys and values,
      [batch, positions, heads, head_dim] (the base cache's positions).
    source: its own projection of the encoder output (draft_source
      'own'), [batch, source_length, heads, head_dim]; None otherwise.
  """
  attention: attention.KVCache
  source: attention.KVCache | None = None


class DraftLayer(nnx.Module):
  """fuse([f; e]) -> self-attention -> [source attention] -> FFN -> norm,
  each sublayer pre-norm with a residual."""

  def __init__(self, d_model: int, num_heads: int, hidden: int, *,
               head_dim: int | None = None,
               source_kv_heads: int | None = None, source: str = 'none',
               extra_features: int = 0, dtype, param_dtype, rngs: nnx.Rngs):
    """Creates the layer.

    Its attention has the base's head layout (num_heads heads of head_dim)
    with keys and values of every head (no grouping), its norms are
    LayerNorms and its feed-forward layer a ReLU one, whatever the base's.

    Args:
      d_model: width of the base model's features.
      num_heads: attention heads.
      hidden: the feed-forward layer's hidden width.
      head_dim: width of a head (None: d_model // num_heads, which must
        then divide).
      source_kv_heads: key/value heads of the base's source memory that
        source 'base' reads (None: num_heads).
      source: one of base.DRAFT_SOURCES.
      extra_features: lower decoder layers whose outputs come with the top
        feature (each d_model wide, after it).
      dtype: computation dtype (None: from inputs and params).
      param_dtype: parameter dtype.
      rngs: initialisation randomness.
    """
    if source not in base.DRAFT_SOURCES:
      raise ValueError(f'draft source {source!r} is not one of '
                       f'{base.DRAFT_SOURCES}.')
    linear = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    norm = lambda width=d_model: nnx.LayerNorm(
        width, epsilon=1e-6, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
    self.d_model = d_model
    self.source = source
    self.extra_features = extra_features
    if extra_features:
      self.feature_norm = norm(extra_features * d_model)
      self.reduce = nnx.Linear((1 + extra_features) * d_model, d_model,
                               **linear)
    self.fuse = nnx.Linear(2 * d_model, d_model, **linear)
    self.attention_norm = norm()
    self.attention = attention.SelfAttention(d_model, num_heads,
                                             head_dim=head_dim, **linear)
    if source != 'none':
      self.source_norm = norm()
      self.source_attention = attention.CrossAttention(
          d_model, num_heads, head_dim=head_dim,
          num_kv_heads=source_kv_heads if source == 'base' else None,
          own_memory=source == 'own', **linear)
    self.ffn_norm = norm()
    self.up = nnx.Linear(d_model, hidden, **linear)
    self.down = nnx.Linear(hidden, d_model, **linear)
    self.out_norm = norm()

  def base_features(self, features: jax.Array) -> jax.Array:
    """[..., (1 + extra) * d_model] the base's features at a position (top
    first) -> [..., d_model] the first step's input."""
    if not self.extra_features:
      return features
    top, extra = features[..., :self.d_model], features[..., self.d_model:]
    return self.reduce(jnp.concatenate(
        [top, self.feature_norm(extra).astype(top.dtype)], axis=-1))

  def project_source(self, encoded: jax.Array) -> attention.KVCache:
    """[batch, source_length, d_model] encoder output -> the layer's own
    keys and values of it (draft_source 'own')."""
    return self.source_attention.project_memory(encoded)

  def _apply(self, features, next_embeds, attend, source):
    x = self.fuse(jnp.concatenate(
        [features, next_embeds.astype(features.dtype)], axis=-1))
    x = x + attend(self.attention_norm(x))
    if self.source != 'none':
      if source is None:
        raise ValueError(f'the draft layer attends to the source '
                         f'(draft_source={self.source!r}): pass it.')
      x = x + self.source_attention(self.source_norm(x), source.memory,
                                    source.valid)
    x = x + self.down(jax.nn.relu(self.up(self.ffn_norm(x))))
    return self.out_norm(x)

  def unroll(self, features: jax.Array, next_embeds: jax.Array,
             source: base.DraftSource | None = None,
             feed: Callable[[int, jax.Array], jax.Array] | None = None
             ) -> jax.Array:
    """Every drafting step at every position: what decoding computes, for
    training and analysis.

    At position t (the last accepted one), step 1 reads the base's entries
    at positions <= t; step j > 1 writes the entry (g of step j - 1, the
    embedding of the token it reads) and attends to the base's entries
    <= t and its own entries of steps 2..j at t, exactly the cache a decode
    holds there.

    Args:
      features: [batch, T, (1 + extra) * d_model] the base's features.
      next_embeds: [batch, T, S, d_model]: at [:, t, j - 1] the embedding
        of token t + j, read by step j (S steps).
      source: the source (draft_source other than 'none').
      feed: the training-time test: (step j - 1 >= 1, g of step j - 1
        [batch, T, d_model]) -> [batch, T, d_model] the embedding step
        j > 1 reads in place of next_embeds' (e.g. of the argmax of g's
        logits: the token decoding would have drafted). Step 1 always
        reads next_embeds: head 1's token is the base's, always accepted,
        so part of the prefix (the data, in training). None: next_embeds
        throughout.

    Returns:
      [batch, T, S, d_model]: g of step j at [:, t, j - 1], the estimate of
      f_{t+j} (the state giving token t + j + 1).
    """
    batch, length = features.shape[:2]
    positions = jnp.broadcast_to(jnp.arange(length), (batch, length))
    causal = attention.causal_mask(positions, length)  # [b, 1, T, T]
    base = {}
    embeds = lambda step, state: (next_embeds[:, :, step]
                                  if feed is None or step == 0
                                  else feed(step, state))

    def attend_base(y):
      q, base['k'], base['v'] = self.attention.project(y)
      out = jax.nn.dot_product_attention(q, base['k'], base['v'],
                                         mask=causal)
      return self.attention.output(out)

    top = features[..., :self.d_model]
    states = [self._apply(self.base_features(features), embeds(0, top),
                          attend_base, source)]
    own_keys, own_values = [], []

    def attend_own(y):
      q, k, v = self.attention.project(y)
      own_keys.append(k)
      own_values.append(v)
      return self.attention.output(attention.attend_with_own_entries(
          q, base['k'], base['v'], causal, own_keys, own_values))

    for step in range(1, next_embeds.shape[2]):
      states.append(self._apply(states[-1], embeds(step, states[-1]),
                                attend_own, source))
    return jnp.stack(states, axis=2)

  def init_cache(self, batch: int, positions: int, dtype,
                 encoded: jax.Array | None = None) -> DraftCache:
    """An empty cache of `positions` positions per example.

    Args:
      batch, positions: its shape.
      dtype: the entries' dtype.
      encoded: [batch, source_length, d_model] the encoder output, which
        draft_source 'own' projects once here; None otherwise.
    """
    source = None
    if self.source == 'own':
      if encoded is None:
        raise ValueError("draft_source 'own' projects the encoder output: "
                         'pass it.')
      source = self.project_source(encoded)
    return DraftCache(attention.KVCache.zeros(
        batch, positions, self.attention.num_heads, self.attention.head_dim,
        dtype), source)

  def extend(self, cache: DraftCache, features: jax.Array,
             next_embeds: jax.Array, start: jax.Array,
             source: base.DraftSource | None = None
             ) -> tuple[jax.Array, DraftCache]:
    """Writes n entries per example at start .. start + n - 1, attends.

    Args:
      cache: from `init_cache` or a previous `extend`.
      features: [batch, n, d_model] the inputs at those positions: the
        base's (through `base_features`) or the layer's own g.
      next_embeds: [batch, n, d_model] embeddings of the token after each.
      start: [batch] absolute position of the first entry.
      source: the source (draft_source other than 'none').

    Returns:
      ([batch, n, d_model] g at those positions, updated cache).
    """
    entries = {}

    def attend(y):
      out, entries['cache'] = self.attention.extend(y, cache.attention, start)
      return out

    out = self._apply(features, next_embeds, attend, source)
    return out, dataclasses.replace(cache, attention=entries['cache'])

  def tree_level(self, cache: DraftCache, features: jax.Array,
                 next_embeds: jax.Array, committed: jax.Array,
                 nodes: attention.KVCache | None, paths: jax.Array,
                 source: base.DraftSource | None = None
                 ) -> tuple[jax.Array, attention.KVCache]:
    """One level of a token tree drafted at once: what `extend` computes
    for each node after its own path, without writing the cache (sibling
    branches sit at the same positions).

    Args:
      cache: the layer's cache; entries at positions <= committed are
        read.
      features: [batch, W, d_model] each node's input: its parent's g.
      next_embeds: [batch, W, d_model] the embedding of each node's token.
      committed: [batch] the last accepted position (the root's).
      nodes: the entries of the nodes drafted before this level,
        [batch, M, heads, head_dim] (None: none yet).
      paths: [batch, W, M + W] bool: the nodes each one attends to, its
        ancestors below the root and itself (this level's nodes last).

    Returns:
      ([batch, W, d_model] g at each node, the node entries with this
      level's appended).
    """
    entries = {}
    positions = jnp.arange(cache.attention.key.shape[1])
    mask = (positions[None, :] <= committed[:, None])[:, None, None, :]

    def attend(y):
      q, k, v = self.attention.project(y)
      if nodes is not None:
        k = jnp.concatenate([nodes.key, k.astype(nodes.key.dtype)], axis=1)
        v = jnp.concatenate([nodes.value, v.astype(nodes.value.dtype)],
                            axis=1)
      entries['nodes'] = attention.KVCache(k, v)
      return self.attention.output(attention.attend_with_node_entries(
          q, cache.attention.key, cache.attention.value, mask, k, v, paths))

    out = self._apply(features, next_embeds, attend, source)
    return out, entries['nodes']


class AutoregressiveDrafter(base.Drafter):
  """The draft layer as a drafter: heads 2..k are its drafting steps 1..k-1
  (head i its (i - 1)-th), trained unrolled as decoding runs them; its
  parameters under 'draft/'."""
  dependent = True
  reads_tokens = True
  source_kinds = base.DRAFT_SOURCES
  reads_features = True
  samples_positions = False  # It attends over every position.
  tensor_rules = (
      (r'draft/(attention/qkv|source_attention/(query|key_value)|up)/'
       r'(kernel|bias)', (..., T)),
      (r'draft/(attention|source_attention)/out/kernel', (T, None)),
      (r'draft/down/kernel', (T, None)),
  )
  cache_rules = ((r'(attention|source)/(key|value)', (None, None, T, None)),)

  def __init__(self, config, *, rngs: nnx.Rngs):
    self.source_kind = config.draft_source
    self.d_model = config.d_model
    self.draft = DraftLayer(
        config.d_model, config.num_heads, config.head_hidden or config.d_ff,
        head_dim=config.attention_head_dim, source_kv_heads=config.kv_heads,
        source=config.draft_source,
        extra_features=len(config.draft_feature_layers),
        dtype=jnp.dtype(config.dtype),
        param_dtype=jnp.dtype(config.param_dtype), rngs=rngs)

  def states(self, view, first, count, rows=None):
    if rows is not None:  # Its steps attend over every position.
      raise ValueError('the draft layer attends over every position: its '
                       'states are of every position (rows=None).')
    states = view.hidden[..., None, :]
    needed = first + count - 1
    if needed:  # Heads 2..: the layer's steps 1..needed.
      if view.next_tokens is None or view.next_tokens.shape[-1] < needed:
        raise ValueError(f'the draft layer\'s heads {first + 1}..'
                         f'{first + count} read the {needed} tokens before '
                         f'theirs: pass next_tokens.')
      steps = self.draft.unroll(view.features,
                                view.embed(view.next_tokens[..., :needed]),
                                view.source, view.feed)
      states = jnp.concatenate([states, steps], axis=-2)
    return states[..., first:, :]

  def auxiliary_loss(self, states, first, hidden, target, pad_id):
    if first + states.shape[2] <= 1:
      return 0.0
    return feature_loss(states, first, hidden, target, pad_id)

  def init_cache(self, batch, positions, dtype, encoded=None):
    return self.draft.init_cache(batch, positions, dtype, encoded)

  def source(self, memory, valid, encoded=None, cache=None):
    if self.source_kind != 'own':
      return super().source(memory, valid)
    own = (self.draft.project_source(encoded) if cache is None
           else cache.source)
    return base.DraftSource(own, valid)

  def _root(self, view):
    """Every scored position's entry (stale ones are overwritten later):
    (g at the last accepted position [batch, d_model], the cache)."""
    layer = self.draft
    states, cache = layer.extend(view.cache,
                                 layer.base_features(view.features),
                                 view.embed(view.next_tokens), view.start,
                                 view.source)
    return ops.take_at(states, view.last), cache

  def draft_tokens(self, view, choose, k):
    # Then one entry per drafted token, at the positions after the last
    # accepted one.
    layer, source = self.draft, view.source
    state, cache = self._root(view)
    proposals, logits = [], []
    for index in range(k - 1):
      logits.append(view.project(state))
      proposals.append(choose(index, logits[-1]))
      if index < k - 2:
        state, cache = layer.extend(
            cache, state[:, None], view.embed(proposals[-1])[:, None],
            view.start + view.last + 1 + index, source)
        state = state[:, 0]
    return jnp.stack(proposals, axis=1), jnp.stack(logits, axis=1), cache

  def draft_tree(self, view, grow, depth):
    # The scored positions' entries, as for a chain; the nodes' own
    # entries are kept apart (`DraftLayer.tree_level`).
    layer, source = self.draft, view.source
    states, cache = self._root(view)
    states = states[:, None]  # [batch, 1, d_model]: the root's g.
    committed = view.start + view.last
    nodes, paths = None, None  # paths: [batch, W, M] each node's own.
    for level in range(depth):
      tokens, parents = grow(level, view.project(states))
      if level + 1 == depth:
        break
      width = tokens.shape[1]
      own = jnp.broadcast_to(jnp.eye(width, dtype=bool),
                             (tokens.shape[0], width, width))
      if paths is None:
        paths = own
      else:
        paths = jnp.concatenate(
            [jnp.take_along_axis(paths, parents[..., None], axis=1), own],
            axis=2)
      states, nodes = layer.tree_level(
          cache, jnp.take_along_axis(states, parents[..., None], axis=1),
          view.embed(tokens), committed, nodes, paths, source)
    return cache


def feature_loss(states: jax.Array, first: int, hidden: jax.Array,
                 target: jax.Array, pad_id: int) -> jax.Array:
  """Smooth-L1 distance of the draft layer's states to the base's features
  they estimate (EAGLE's regression), mean over the steps, positions and
  features.

  Args:
    states: [batch, T, count, d_model] states of heads first+1 ..
      first+count; head h + 1 (0-based h >= 1) at position t estimates
      hidden[:, t + h].
    first: 0-based index of states' first head.
    hidden: [batch, T, d_model] the base's decoder outputs; a fixed target
      (no gradient into the base from this loss).
    target: [batch, T] target ids: hidden[:, t + h] counts where
      target[:, t + h] is not pad_id.
    pad_id: padding id.
  """
  length = hidden.shape[1]
  hidden = jax.lax.stop_gradient(hidden).astype(jnp.float32)
  total = count = 0.0
  for index in range(states.shape[2]):
    h = first + index
    if h == 0 or h >= length:
      continue  # Head 1 is the base itself; no feature that far.
    error = jnp.abs(states[:, :length - h, index].astype(jnp.float32)
                    - hidden[:, h:])
    smooth_l1 = jnp.where(error < 1.0, 0.5 * error**2, error - 0.5).mean(-1)
    mask = (target[:, h:] != pad_id).astype(jnp.float32)
    total += (smooth_l1 * mask).sum()
    count += mask.sum()
  return total / jnp.maximum(count, 1.0)
