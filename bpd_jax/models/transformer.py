"""Transformer encoder-decoder and decoder-only models with proposal heads.

One set of blocks serves both shapes: `num_encoder_layers > 0` gives the
encoder-decoder of the translation experiments, `num_encoder_layers == 0` a
decoder-only model for conditional generation from a prompt.

Two ways to run the decoder:
- `__call__`: the whole target at once (training, scoring), causal mask.
- `extend`: n >= 1 new positions per example at that example's own offset,
  with an explicit cache (decoding). Greedy decoding extends by 1 position,
  blockwise decoding by k.

Decoder self-attention is causal over every earlier position, or local
(`local_attention_block` > 0): the Image Transformer's local 1D attention
(Parmar et al. 2018), which keeps the cost of a decoding step independent of
the sequence length, as generating a 32x32x3 image (3,072 positions) needs.

Token ids are shared by source and target: `pad_id` pads, `eos_id` ends a
sequence, `bos_id` starts the decoder input of the encoder-decoder. A
pad_id of -1 (a checkpoint without a pad token) is no vocabulary id: every
lookup reads it as row 0 (`embedding_rows`), and no real position attends
to a padded one, so what it reads there is never seen.
Position encodings (sinusoidal, learned, image raster codes) are in
models/positions.py, rotary positions in models/rotary.py; the architecture
(TransformerConfig) in models/transformer_config.py, the layers in
models/layers.py.

Computation runs in `config.dtype` (bfloat16 and float16 included): the
norms' statistics, the attention softmax and the rotary angles in at least
float32, the cache in the compute dtype, and the vocabulary logits
accumulated and returned in at least float32.
"""

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from bpd_jax.infra import ops
from bpd_jax.models import attention
from bpd_jax.models import drafters
from bpd_jax.models import dropout as dropout_lib
from bpd_jax.models import layers
from bpd_jax.models import mixture as mixture_lib
from bpd_jax.models import positions as positions_lib
from bpd_jax.models.transformer_config import TransformerConfig


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DecodeCache:
  """Everything a decoding step reads besides the new tokens.

  Attributes:
    self_attention: one KVCache per decoder layer,
      [batch, positions, kv_heads, head_dim].
    memory: one projected encoder output per decoder layer,
      [batch, source_length, kv_heads, head_dim]; empty for decoder-only
      models.
    memory_valid: [batch, source_length] bool, False at source padding;
      None for decoder-only models.
    skip_source: [batch, source_length] the source tokens the image input
      skip or window reads at every step (config.image.reads_source); None
      otherwise.
    draft: the drafter's own cache (its `init_cache`: a draft layer's or a
      block drafter's entries, at the same positions); None for drafters
      that keep none.
  """
  self_attention: tuple[attention.KVCache, ...]
  memory: tuple[attention.KVCache, ...]
  memory_valid: jax.Array | None
  skip_source: jax.Array | None = None
  draft: object = None


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DecoderOutputs:
  """What a full-sequence pass gives the heads (`Transformer.run`).

  Attributes:
    hidden: [batch, T, d_model] the decoder's top outputs.
    features: [batch, T, (1 + m) * d_model] what a drafter reads at each
      position: the top output, then the m `draft_feature_layers`'
      outputs (hidden itself when there are none).
    source: the drafter's view of the source (draft_source other than
      'none'); None otherwise.
  """
  hidden: jax.Array
  features: jax.Array
  source: drafters.DraftSource | None = None


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DecodingWeights:
  """Output weights laid out for decoding (`Transformer.decoding_weights`).

  Attributes:
    vocab: [d_model, vocab_size] the vocabulary projection. With tied
      embeddings this is the table transposed, once: on XLA-CPU a product
      [m, d] x [d, V] runs 2-3x faster for m = 2..15 rows than the same
      product against the [V, d] table, which XLA would also re-transpose
      inside the decoding loop on every call. With a mixture output
      (config.mixture), the [d_model, 3M] kernel of its parameters.
    scoring: head 1 through the paper heads' layer
      (head1_from_base=False); None: head 1 is the base's output.
    proposals: heads 2..k as the drafter lays them out (`Drafter.weights`;
      None for k = 1 and for drafters applied as modules).
    embed: [vocab_size, d_model] the token embedding a drafter reads
      tokens with (None for drafters that read none).
    output_bias: [3M] the mixture parameters' bias (None without one).
    draft_ids: [n] the token ids proposals are chosen from (a drafting
      vocabulary, as FR-Spec's frequent tokens); None: all of them.
    draft_vocab: [d_model, n] the projection's columns of those ids, what
      a proposal's logits cost instead of the whole vocabulary's.
  """
  vocab: jax.Array
  scoring: drafters.HeadWeights | None
  proposals: object
  embed: jax.Array | None = None
  output_bias: jax.Array | None = None
  draft_ids: jax.Array | None = None
  draft_vocab: jax.Array | None = None


class Transformer(nnx.Module):
  """Encoder-decoder or decoder-only Transformer with proposal heads."""

  def __init__(self, config: TransformerConfig, *, rngs: nnx.Rngs):
    self.config = config
    embed = lambda n: nnx.Embed(
        n, config.d_model, dtype=jnp.dtype(config.dtype),
        param_dtype=jnp.dtype(config.param_dtype),
        embedding_init=nnx.initializers.normal(config.d_model ** -0.5),
        rngs=rngs)
    self.target_embed = embed(config.vocab_size)
    if config.is_encoder_decoder and not config.share_embeddings:
      self.source_embed = embed(config.vocab_size)
    if config.positions == 'learned':
      self.target_positions = embed(config.max_target_len)
      if config.is_encoder_decoder:
        self.source_positions = embed(config.max_source_len)
    if config.image is not None:
      self.channel_embed = embed(config.image.channels)
      if config.image.source_skip:
        self.skip_embed = embed(config.vocab_size)
      if config.image.source_window:
        self.window_projection = nnx.Linear(
            config.image.window_width, config.d_model,
            **layers.linear_kwargs(config, rngs))
        self.phase_embed = embed(config.image.upscale ** 2)
    self.embed_dropout = nnx.Dropout(config.dropout_rate)
    self.encoder_layers = nnx.List(
        [layers.EncoderLayer(config, rngs=rngs)
         for _ in range(config.num_encoder_layers)])
    self.decoder_layers = nnx.List(
        [layers.DecoderLayer(config, rngs=rngs)
         for _ in range(config.num_decoder_layers)])
    if config.pre_norm:
      self.decoder_norm = layers.norm(config, rngs)
      if config.is_encoder_decoder:
        self.encoder_norm = layers.norm(config, rngs)
    if config.mixture is not None:
      mixture = config.mixture
      self.mixture_output = nnx.Linear(
          config.d_model, mixture.num_params, use_bias=True,
          kernel_init=nnx.initializers.normal(
              mixture_lib.INITIAL_KERNEL_SCALE * config.d_model ** -0.5),
          bias_init=lambda *_: jnp.asarray(
              mixture.initial_bias(config.vocab_size),
              jnp.dtype(config.param_dtype)),
          **layers.linear_kwargs(config, rngs))
    elif not config.tie_output:
      self.output = nnx.Linear(config.d_model, config.vocab_size,
                               use_bias=False,
                               **layers.linear_kwargs(config, rngs))
    # The drafter of heads 2..k (its parameters under 'heads').
    self.heads = drafters.get(config.head_layer)(config, rngs=rngs)

  # --- Embeddings and outputs.

  def _embed(self, tokens, positions, source: bool, dropout_rngs,
             source_tokens=None):
    """[b, n] tokens at [b, n] positions -> [b, n, d_model].

    `source_tokens` [b, source_length]: the source, for the decoder's
    image input skip.
    """
    config = self.config
    table = self.target_embed
    if source and not config.share_embeddings:
      table = self.source_embed
    x = table(embedding_rows(tokens)) * config.embedding_scale
    # Position codes in at least float32: a 16-bit float does not hold the
    # positions past 256 (bfloat16) or 2048 (float16) exactly.
    wide = jnp.promote_types(x.dtype, jnp.float32)
    if config.positions == 'learned':
      x = x + (self.source_positions if source else
               self.target_positions)(positions)
    elif config.image is not None:
      image = config.image
      side = image.source_side if source else image.target_side
      x = x + positions_lib.raster_codes(positions, side, image.channels,
                                         config.d_model, wide).astype(x.dtype)
      x = x + self.channel_embed(positions % image.channels)
      if image.source_skip and not source:
        x = x + self.skip_embed(embedding_rows(jnp.take_along_axis(
            source_tokens, positions_lib.source_under(positions, image),
            axis=1)))
      if image.source_window and not source:
        window = positions_lib.source_window_values(source_tokens,
                                                    positions, image)
        x = x + self.window_projection(window.astype(x.dtype))
        x = x + self.phase_embed(positions_lib.subpixel_phase(positions,
                                                              image))
    elif config.positions == 'sinusoidal':
      x = x + positions_lib.sinusoidal(positions, config.d_model,
                                       wide).astype(x.dtype)
    # Rotary positions rotate the attention's queries and keys instead.
    return dropout_lib.apply(self.embed_dropout, x, dropout_rngs)

  def head_states(self, hidden: jax.Array | DecoderOutputs, first: int,
                  count: int, next_tokens: jax.Array | None = None,
                  own_drafts: bool = False, rows: jax.Array | None = None,
                  block_lengths: jax.Array | None = None) -> jax.Array:
    """States of heads first+1 .. first+count from decoder outputs (the
    drafter's `states`).

    Args:
      hidden: [batch, T, d_model] decoder outputs, or the `run` of a pass
        (what a drafter that reads the source or lower layers needs).
      first: 0-based index of the first head.
      count: number of heads.
      next_tokens: [batch, T, >= first + count - 1] the tokens after each
        position (`losses.shifted_targets(target, 0, ...)`): what heads
        1, 2, ... are taken to have proposed, read by drafters that read
        tokens (teacher forcing); unused by the others.
      own_drafts: dependent heads read the tokens heads 2 .. before them
        would have drafted (each state's argmax, no gradient through the
        choice: the training-time test), not next_tokens'; head 1's token
        stays next_tokens' (the base's, always accepted: the prefix).
      rows: [batch, n] the positions wanted; None: every position.
      block_lengths: [batch, n] a block drafter's block size at each of
        `rows` (`Drafter.training_lengths`); None: num_proposal_heads.

    Returns:
      [batch, T or n, count, d_model].
    """
    outputs = (hidden if isinstance(hidden, DecoderOutputs)
               else DecoderOutputs(hidden, hidden))
    if self.heads.reads_tokens and next_tokens is None and (
        first + count > 1):
      raise ValueError(f'{self.config.head_layer} heads read the tokens '
                       'before theirs: pass next_tokens.')
    feed = None
    if own_drafts:
      feed = lambda _, state: self.token_embedding(
          jax.lax.stop_gradient(jnp.argmax(self.logits(state), -1)))
    view = drafters.TrainingView(
        hidden=outputs.hidden, features=outputs.features,
        source=outputs.source, next_tokens=next_tokens,
        embed=self.token_embedding, feed=feed, block_lengths=block_lengths)
    return self.heads.states(view, first, count, rows)

  def head_logits(self, hidden: jax.Array | DecoderOutputs, first: int,
                  count: int, next_tokens: jax.Array | None = None
                  ) -> jax.Array:
    """Logits of heads first+1 .. first+count: `head_states` through the
    vocabulary projection, [batch, T, count, vocab_size]."""
    return self.logits(self.head_states(hidden, first, count, next_tokens))

  def token_embedding(self, tokens: jax.Array) -> jax.Array:
    """[...] target tokens -> [..., d_model], scaled as the decoder's
    input embedding, without positions (what drafters read tokens with)."""
    return (self.target_embed(embedding_rows(tokens))
            * self.config.embedding_scale)

  def logits(self, states: jax.Array) -> jax.Array:
    """The shared vocabulary projection: [..., d_model] -> [..., vocab],
    in at least float32."""
    return self._project(states, self._vocab(), self._output_bias())

  def _project(self, states: jax.Array, vocab: jax.Array,
               bias: jax.Array | None) -> jax.Array:
    """[..., d_model] states -> [..., vocab_size] logits, through the
    projection `vocab` (and, with a mixture output, its bias and the
    mixture's log-probabilities: the one place its distribution is made)."""
    logits = _vocab_logits(states, vocab)
    if self.config.mixture is None:
      return logits
    return self.config.mixture.log_probs(logits + bias,
                                         self.config.vocab_size)

  def label_log_probs(self, states: jax.Array,
                      labels: jax.Array) -> jax.Array:
    """A mixture output's log P(labels) [...] from states [..., d_model]:
    the training loss's likelihood (`OutputMixture.label_log_probs`), the
    same distribution `logits` gives whole."""
    params = _vocab_logits(states, self._vocab()) + self._output_bias()
    return self.config.mixture.label_log_probs(params, labels,
                                               self.config.vocab_size)

  def _output_bias(self) -> jax.Array | None:
    """[3M] the mixture parameters' bias; None without a mixture."""
    if self.config.mixture is None:
      return None
    return self.mixture_output.bias[...]

  def _vocab(self) -> jax.Array:
    """[d_model, vocab_size] the vocabulary projection, in the compute
    dtype: the tied embedding transposed, or the output layer's kernel
    ([d_model, 3M] the mixture's, with a mixture output)."""
    if self.config.mixture is not None:
      vocab = self.mixture_output.kernel[...]
    elif self.config.tie_output:
      vocab = self.target_embed.embedding[...].T
    else:
      vocab = self.output.kernel[...]
    return vocab.astype(jnp.dtype(self.config.dtype))

  def decoding_weights(self, k: int, draft_ids: jax.Array | None = None
                       ) -> DecodingWeights:
    """The output weights of decoding with k heads, laid out once.

    Decoders take these before their loop and pass them to
    `next_token_logits` and `proposal_logits`, so that no call inside the
    loop slices parameters or transposes the vocabulary table.

    Args:
      k: the block size.
      draft_ids: [n] distinct token ids the proposals are chosen from
        (a drafting vocabulary); None: the whole vocabulary. Verification
        reads every id: what the drafts leave out costs acceptance, never
        the output.
    """
    dtype = jnp.dtype(self.config.dtype)
    embed = None
    if self.heads.reads_tokens and k > 1:
      embed = (self.target_embed.embedding[...]
               * self.config.embedding_scale).astype(dtype)
    vocab, draft_vocab = self._vocab(), None
    if draft_ids is not None:
      if self.config.mixture is not None:
        raise ValueError('a drafting vocabulary chooses among the '
                         'vocabulary projection\'s ids; a mixture output '
                         '(image models) has no such projection.')
      # Sorted once here, so that the scatter of every drafted position's
      # logits (`_draft_logits`, inside the decoding loop) may say so.
      draft_ids = jnp.sort(jnp.asarray(draft_ids, jnp.int32))
      draft_vocab = vocab[:, draft_ids]
    return DecodingWeights(
        vocab=vocab, scoring=self.heads.scoring_weights(dtype),
        proposals=self.heads.weights(k, dtype) if k > 1 else None,
        embed=embed, output_bias=self._output_bias(), draft_ids=draft_ids,
        draft_vocab=draft_vocab)

  def next_token_logits(self, hidden: jax.Array,
                        weights: DecodingWeights | None = None) -> jax.Array:
    """Head 1: [..., d_model] -> [..., vocab_size].

    Args:
      hidden: decoder outputs.
      weights: from `decoding_weights` (taken here when not given).
    """
    if weights is None:
      weights = self.decoding_weights(1)
    states = self._top(hidden)
    if weights.scoring is not None:  # Head 1 through the heads' layer.
      states = self.heads.apply(weights.scoring, states)[..., 0, :]
    return self._project(states, weights.vocab, weights.output_bias)

  def proposal_logits(self, cache: DecodeCache, features: jax.Array,
                      next_tokens: jax.Array, start: jax.Array,
                      last: jax.Array, k: int,
                      weights: DecodingWeights | None = None):
    """Heads 2..k of a one-pass drafter after the last accepted position:
    `DecodingFns.proposal_logits`.

    Args:
      cache, features, next_tokens, start, last: as `draft`'s.
      k: the block size, 2 <= k <= num_proposal_heads.
      weights: from `decoding_weights(k)`, the same k (taken here when not
        given).

    Returns:
      (logits [batch, k - 1, vocab_size], the updated cache).
    """
    if self.heads.dependent:
      raise TypeError(f'{self.config.head_layer!r} heads read each other\'s '
                      f'proposals: their draft is made head after head, '
                      f'not in one pass; call Transformer.draft.')
    if weights is None:
      weights = self.decoding_weights(k)
    view = self._decode_view(cache, features, next_tokens, start, last,
                             weights)
    states, draft = self.heads.proposal_states(view, k)
    return (self._draft_logits(states, weights),
            dataclasses.replace(cache, draft=draft))

  def _draft_logits(self, states: jax.Array,
                    weights: DecodingWeights) -> jax.Array:
    """A proposal's logits [..., vocab_size] from states [..., d_model]:
    through the drafting vocabulary's columns where there is one, -inf at
    every other id (no draft, draw or tree branch picks them; a sampled
    proposal's distribution q is exactly the one it was drawn from)."""
    if weights.draft_ids is None:
      return self._project(states, weights.vocab, weights.output_bias)
    chosen = _vocab_logits(states, weights.draft_vocab)
    logits = jnp.full((*states.shape[:-1], self.config.vocab_size),
                      -jnp.inf, chosen.dtype)
    return logits.at[..., weights.draft_ids].set(
        chosen, indices_are_sorted=True, unique_indices=True)

  def _top(self, features: jax.Array) -> jax.Array:
    """The decoder's top output [..., d_model] of `extend`'s features
    (which carry the lower layers' features a drafter reads after it)."""
    if not self.config.draft_feature_layers:
      return features
    return features[..., :self.config.d_model]

  def _decode_view(self, cache: DecodeCache, features, next_tokens, start,
                   last, weights: DecodingWeights) -> drafters.DecodeView:
    """What the drafter reads after a call (`drafters.DecodeView`)."""
    return drafters.DecodeView(
        cache=cache.draft,
        source=self.heads.source(cache.memory, cache.memory_valid,
                                 cache=cache.draft),
        hidden=self._top(features), features=features,
        next_tokens=next_tokens, start=start, last=last,
        weights=weights.proposals,
        embed=lambda tokens: weights.embed[embedding_rows(tokens)],
        project=lambda states: self._draft_logits(states, weights))

  def draft(self, cache: DecodeCache, features: jax.Array,
            next_tokens: jax.Array, start: jax.Array, last: jax.Array,
            choose, k: int, weights: DecodingWeights | None = None):
    """Heads 2..k's draft made head after head (a dependent drafter:
    sequential heads, the draft layer): `DecodingFns.draft`.

    Args:
      cache: the decoding cache (the drafter's own in `cache.draft`).
      features: [batch, n, ...] `extend`'s features at the n positions
        the last call scored, start .. start + n - 1.
      next_tokens: [batch, n] the token after each of those positions: the
        accepted tokens, then head 1's token after the last accepted one
        (what follows is stale and unread).
      start: [batch] absolute position of features[:, 0].
      last: [batch] index of the last accepted position among the n.
      choose: (index, logits [batch, vocab]) -> [batch] the token of draft
        position `index` (0-based, head index + 2), e.g. argmax or a draw.
      k: the block size, 2 <= k <= num_proposal_heads.
      weights: from `decoding_weights(k)`.

    Returns:
      (proposals [batch, k - 1], logits [batch, k - 1, vocab_size]: the
      distribution each proposal was chosen from, the updated cache).
    """
    if weights is None:
      weights = self.decoding_weights(k)
    view = self._decode_view(cache, features, next_tokens, start, last,
                             weights)
    proposals, logits, draft = self.heads.draft_tokens(view, choose, k)
    return proposals, logits, dataclasses.replace(cache, draft=draft)

  def draft_tree(self, cache: DecodeCache, features: jax.Array,
                 next_tokens: jax.Array, start: jax.Array, last: jax.Array,
                 grow, k: int, weights: DecodingWeights | None = None):
    """A tree of drafts grown level by level, each node drafted once (a
    dependent drafter): `DecodingFns.draft_tree`.

    Args:
      cache, features, next_tokens, start, last, k, weights: as `draft`'s.
      grow: (level, logits [batch, W, vocab_size]) -> (tokens [batch, W'],
        parents [batch, W']): picks the children of the level's W nodes
        and says which the drafter expands next (`decoding/tree_growth.py`).

    Returns:
      The updated cache.
    """
    if weights is None:
      weights = self.decoding_weights(k)
    view = self._decode_view(cache, features, next_tokens, start, last,
                             weights)
    draft = self.heads.draft_tree(view, grow, k - 1)
    return dataclasses.replace(cache, draft=draft)

  # --- Full-sequence passes (training and scoring).

  def encode(self, source: jax.Array, dropout_rngs: nnx.Rngs | None = None):
    """[batch, source_length] tokens -> [batch, source_length, d_model]."""
    valid = source != self.config.pad_id
    positions = jnp.broadcast_to(jnp.arange(source.shape[1]), source.shape)
    x = self._embed(source, positions, True, dropout_rngs)
    mask = attention.padding_mask(valid)
    for layer in self.encoder_layers:
      x = layer(x, mask, dropout_rngs)
    return self.encoder_norm(x) if self.config.pre_norm else x

  def __call__(self, source: jax.Array | None, decoder_input: jax.Array,
               dropout_rngs: nnx.Rngs | None = None) -> jax.Array:
    """Decoder outputs for a whole target, without a cache: `run`'s
    hidden, [batch, length, d_model]."""
    return self.run(source, decoder_input, dropout_rngs).hidden

  def run(self, source: jax.Array | None, decoder_input: jax.Array,
          dropout_rngs: nnx.Rngs | None = None) -> DecoderOutputs:
    """Decoder outputs for a whole target, without a cache.

    Args:
      source: [batch, source_length] tokens (None for decoder-only models).
      decoder_input: [batch, length] tokens: for the encoder-decoder the
        target shifted right behind bos_id; for decoder-only models the
        prompt followed by the target.
      dropout_rngs: randomness for dropout (training); None: no dropout.

    Returns:
      DecoderOutputs ([batch, length, d_model] top outputs first); apply
      `head_logits` for logits.
    """
    memory, memory_valid, encoded = self._memory(source, dropout_rngs)
    positions = jnp.broadcast_to(jnp.arange(decoder_input.shape[1]),
                                 decoder_input.shape)
    window = self.config.local_window
    if window is None:
      mask = attention.causal_mask(positions, decoder_input.shape[1])
      self_attend = lambda _, module, y: (module(y, mask, positions), None)
    else:
      self_attend = lambda _, module, y: (module.local(y, window), None)
    features = self._decode(decoder_input, positions, memory, memory_valid,
                            dropout_rngs, self_attend, source)[0]
    return DecoderOutputs(self._top(features), features,
                          self.heads.source(memory, memory_valid, encoded))

  # --- Cached decoding.

  def init_cache(self, batch: int, positions: int,
                 source: jax.Array | None = None) -> DecodeCache:
    """An empty self-attention cache plus the encoded, projected source.

    Args:
      batch: batch size.
      positions: decoder positions to hold (prompt + generated + k - 1).
      source: [batch, source_length] tokens (encoder-decoder only).
    """
    config = self.config
    memory, memory_valid, encoded = self._memory(source, None)
    self_attention = tuple(
        attention.KVCache.zeros(batch, positions, config.kv_heads,
                                config.attention_head_dim,
                                jnp.dtype(config.dtype))
        for _ in self.decoder_layers)
    skip = config.image is not None and config.image.reads_source
    draft = self.heads.init_cache(batch, positions, jnp.dtype(config.dtype),
                                  encoded)
    return DecodeCache(self_attention, memory or (), memory_valid,
                       source if skip else None, draft)

  def extend(self, cache: DecodeCache, tokens: jax.Array,
             start: jax.Array) -> tuple[jax.Array, DecodeCache]:
    """Runs the decoder on n new positions per example, using the cache.

    Args:
      cache: from `init_cache` or a previous `extend`.
      tokens: [batch, n] decoder inputs at positions start .. start + n - 1.
      start: [batch] absolute position of tokens[:, 0] for every example.

    Returns:
      ([batch, n, ...] features: the decoder outputs [..., :d_model], then
      the draft_feature_layers' outputs; updated cache).
    """
    positions = start[:, None] + jnp.arange(tokens.shape[1])
    window = self.config.local_window

    def self_attend(i, module, y):
      return module.extend(y, cache.self_attention[i], start, window)

    hidden, layer_caches = self._decode(
        tokens, positions, cache.memory or None, cache.memory_valid, None,
        self_attend, cache.skip_source)
    return hidden, dataclasses.replace(cache,
                                       self_attention=tuple(layer_caches))

  def extend_tree(self, cache: DecodeCache, tokens: jax.Array,
                  start: jax.Array, depths: jax.Array,
                  ancestors: jax.Array) -> tuple[jax.Array, DecodeCache]:
    """Runs the decoder on a token tree of n nodes per example
    (`DecodingFns.extend_tree`, `decoding/tree.py`).

    Args:
      cache: from `init_cache` or a previous call.
      tokens: [batch, n] node tokens; node 0 is the last accepted token.
      start: [batch] its absolute position; node i sits at start +
        depths[:, i] and is written to cache position start + i.
      depths: [batch, n] node depths.
      ancestors: [batch, n, n] bool: node j is node i or its ancestor.

    Returns:
      ([batch, n, ...] features as `extend`'s, updated cache); the outputs
      of a node equal those of the same tokens decoded as a chain.
    """
    positions = start[:, None] + depths

    def self_attend(i, module, y):
      return module.extend_tree(y, cache.self_attention[i], start, ancestors,
                                positions)

    hidden, layer_caches = self._decode(
        tokens, positions, cache.memory or None,
        cache.memory_valid, None, self_attend, cache.skip_source)
    return hidden, dataclasses.replace(cache,
                                       self_attention=tuple(layer_caches))

  def commit(self, cache: DecodeCache, start: jax.Array,
             nodes: jax.Array) -> DecodeCache:
    """Moves a tree path's entries to consecutive positions
    (`DecodingFns.commit`): the entries at start + nodes[:, j] go to
    start + j, in every layer; nothing else is copied.

    Args:
      cache: after `extend_tree`.
      start: [batch] the root's position.
      nodes: [batch, m] the path's nodes, depth 0 (the root) first.
    """
    positions = start[:, None] + nodes

    def move(entries):  # [batch, positions, kv_heads, head_dim]
      path = jnp.take_along_axis(entries, positions[:, :, None, None],
                                 axis=1)
      return ops.write_at(entries, path, start)

    return dataclasses.replace(cache, self_attention=tuple(
        attention.KVCache(move(c.key), move(c.value))
        for c in cache.self_attention))

  def _memory(self, source, dropout_rngs):
    """Projected encoder output per decoder layer, source validity, and the
    encoder output itself."""
    if not self.config.is_encoder_decoder:
      if source is not None:
        raise ValueError('a decoder-only model takes no source.')
      return None, None, None
    if source is None:
      raise ValueError('an encoder-decoder model needs a source.')
    encoded = self.encode(source, dropout_rngs)
    memory = tuple(layer.cross_attention.project_memory(encoded)
                   for layer in self.decoder_layers)
    return memory, source != self.config.pad_id, encoded

  def _decode(self, tokens, positions, memory, memory_valid, dropout_rngs,
              self_attend, source=None):
    """Decoder stack; `self_attend(i, module, y)` -> (out, layer cache).

    Returns the features (the top output, then the outputs of the
    draft_feature_layers) and each layer's cache."""
    x = self._embed(tokens, positions, False, dropout_rngs, source)
    layer_caches, lower = [], []
    for i, layer in enumerate(self.decoder_layers):
      def attend(module, y, i=i):
        out, layer_cache = self_attend(i, module, y)
        layer_caches.append(layer_cache)
        return out
      x = layer(x, attend, None if memory is None else memory[i],
                memory_valid, dropout_rngs)
      if i in self.config.draft_feature_layers:
        lower.append(x)
    if self.config.pre_norm:
      x = self.decoder_norm(x)
    return jnp.concatenate([x, *lower], axis=-1) if lower else x, layer_caches


def embedding_rows(tokens: jax.Array) -> jax.Array:
  """The embedding rows of token ids [...]: the ids, with padding -1
  (pad_id=-1) read as row 0.

  A table lookup would wrap -1 to the last row (numpy's negative indices);
  clamping says what is read. Padding is never attended to by a real
  position, nor learned (its labels are masked), so the row read there is
  never seen; every id >= 0 reads its own row, as before.
  """
  return jnp.maximum(tokens, 0)


def _vocab_logits(states: jax.Array, vocab: jax.Array) -> jax.Array:
  """[..., d_model] states through the [d_model, vocab_size] projection,
  accumulated and returned in at least float32: a 16-bit model's logits
  keep the precision that comparing near-ties and sampling need."""
  return jnp.matmul(states.astype(vocab.dtype), vocab,
                    preferred_element_type=jnp.promote_types(vocab.dtype,
                                                             jnp.float32))
