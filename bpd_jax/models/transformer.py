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
sequence, `bos_id` starts the decoder input of the encoder-decoder.
Position encodings (sinusoidal, learned, image raster codes) are in
models/positions.py.
"""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from flax import nnx

from bpd_jax.infra import numeric
from bpd_jax.infra import ops
from bpd_jax.models import attention
from bpd_jax.models import draft_layer as draft_layer_lib
from bpd_jax.models import heads as heads_lib
from bpd_jax.models import positions as positions_lib

DTYPES = ('float32', 'bfloat16', 'float16', 'float64')
# Activations of the feed-forward layers (`TransformerConfig.activation`).
# 'gelu' is the tanh approximation, GPT-2's "gelu_new".
ACTIVATIONS = {
    'relu': jax.nn.relu,
    'gelu': functools.partial(jax.nn.gelu, approximate=True),
}

# The paper's WMT14 sizes (Vaswani et al. 2017 "base" and "big"), and small
# ones for tests and CPU demos. Options of `TransformerConfig.from_size`.
SIZES = {
    'tiny': dict(d_model=32, d_ff=64, num_heads=4, num_encoder_layers=2,
                 num_decoder_layers=2),
    'small': dict(d_model=256, d_ff=1024, num_heads=4, num_encoder_layers=3,
                  num_decoder_layers=3),
    'base': dict(d_model=512, d_ff=2048, num_heads=8, num_encoder_layers=6,
                 num_decoder_layers=6),
    'big': dict(d_model=1024, d_ff=4096, num_heads=16, num_encoder_layers=6,
                num_decoder_layers=6),
}


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Architecture of a Transformer with blockwise proposal heads.

  Attributes:
    vocab_size: shared source/target vocabulary size, special ids included.
    d_model: width of every layer's input and output.
    d_ff: hidden width of the position-wise feed-forward layers.
    num_heads: attention heads per attention layer.
    num_encoder_layers: encoder depth; 0 makes a decoder-only model.
    num_decoder_layers: decoder depth.
    dropout_rate: dropout on sublayer outputs, embeddings and the FFN hidden
      layer, in training only.
    pre_norm: layer norm before each sublayer (and after the stack) rather
      than after each residual addition.
    activation: the feed-forward layers' nonlinearity, one of ACTIVATIONS:
      'relu', or 'gelu' (tanh approximation, as GPT-2).
    layer_norm_epsilon: added to the variance in every layer norm.
    scale_embeddings: token embeddings are multiplied by sqrt(d_model)
      before positions are added (Vaswani et al.; GPT-2 does not), wherever
      they are read: decoder and encoder inputs, and the tokens sequential
      heads read.
    positions: 'sinusoidal' or 'learned' position embeddings, or 'image':
      codes of each position's pixel in its image (models/positions.py).
    max_source_len: longest source sequence the encoder accepts.
    max_target_len: most decoder positions (prompt, generated tokens and the
      k - 1 positions of a proposal block past the last one).
    share_embeddings: encoder and decoder share one token embedding.
    tie_output: the vocabulary projection is the transposed target embedding.
    num_proposal_heads: k, the number of blockwise heads (1: base model only).
    head_layer: 'independent', 'joint', 'sequential' (heads that read the
      previous head's proposed token) or 'autoregressive' (a draft layer
      with its own cache; see models/heads.py).
    head_hidden: hidden width of one head's layer; None means d_ff.
    head1_from_base: head 1 is the base model's next-token output, untouched.
    draft_source: where the autoregressive draft layer reads the source
      of an encoder-decoder (models/draft_layer.py): 'none', 'base' (the
      base's top decoder layer's source keys and values) or 'own' (its own
      projection of the encoder output).
    draft_feature_layers: decoder layers (0-based, below the top one)
      whose outputs the draft layer reads beside the top output (after
      EAGLE-3); () for the top alone.
    local_attention_block: 0 for causal attention over every earlier decoder
      position; > 0 for local 1D attention: decoder positions are cut into
      query blocks of this length (see attention.LocalWindow).
    local_attention_memory: with local attention, the positions before its
      block that a query also sees.
    image: the images of positions='image' (sides, channels, input skip);
      None with any other positions.
    pad_id: padding token id.
    eos_id: end-of-sequence token id.
    bos_id: first decoder input of the encoder-decoder.
    dtype: computation dtype.
    param_dtype: parameter dtype.
  """
  vocab_size: int
  d_model: int = 512
  d_ff: int = 2048
  num_heads: int = 8
  num_encoder_layers: int = 6
  num_decoder_layers: int = 6
  dropout_rate: float = 0.1
  pre_norm: bool = True
  activation: str = 'relu'
  layer_norm_epsilon: float = 1e-6
  scale_embeddings: bool = True
  positions: str = 'sinusoidal'
  max_source_len: int = 256
  max_target_len: int = 256
  share_embeddings: bool = True
  tie_output: bool = True
  num_proposal_heads: int = 1
  head_layer: str = 'independent'
  head_hidden: int | None = None
  head1_from_base: bool = True
  draft_source: str = 'none'
  draft_feature_layers: tuple[int, ...] = ()
  local_attention_block: int = 0
  local_attention_memory: int = 0
  image: positions_lib.ImagePositions | None = None
  pad_id: int = 0
  eos_id: int = 1
  bos_id: int = 2
  dtype: str = 'float32'
  param_dtype: str = 'float32'

  def __post_init__(self):
    def check(ok, message):
      if not ok:
        raise ValueError(f'TransformerConfig: {message}')
    for name in ('vocab_size', 'd_model', 'd_ff', 'num_heads',
                 'num_decoder_layers', 'max_source_len', 'max_target_len',
                 'num_proposal_heads'):
      value = getattr(self, name)
      check(numeric.is_integer(value) and value >= 1,
            f'{name}={value!r} must be an integer >= 1.')
    check(numeric.is_integer(self.num_encoder_layers)
          and self.num_encoder_layers >= 0,
          f'num_encoder_layers={self.num_encoder_layers!r} must be an '
          f'integer >= 0.')
    check(self.d_model % self.num_heads == 0,
          f'd_model={self.d_model} must be divisible by '
          f'num_heads={self.num_heads}.')
    check(numeric.is_finite(self.dropout_rate)
          and 0.0 <= self.dropout_rate < 1.0,
          f'dropout_rate={self.dropout_rate!r} must be a finite number in '
          f'[0, 1).')
    check(self.activation in ACTIVATIONS,
          f'activation={self.activation!r} is not one of '
          f'{tuple(ACTIVATIONS)}.')
    check(numeric.is_finite(self.layer_norm_epsilon)
          and self.layer_norm_epsilon > 0,
          f'layer_norm_epsilon={self.layer_norm_epsilon!r} must be a '
          f'finite number > 0.')
    check(self.positions in positions_lib.POSITIONS,
          f'positions={self.positions!r} is not one of '
          f'{positions_lib.POSITIONS}.')
    check(self.head_layer in heads_lib.HEAD_LAYERS,
          f'head_layer={self.head_layer!r} is not one of '
          f'{heads_lib.HEAD_LAYERS}.')
    check(self.head_layer not in heads_lib.DEPENDENT_HEAD_LAYERS
          or self.head1_from_base,
          f'head_layer={self.head_layer!r} starts from the base model\'s '
          'own next token: head1_from_base must be True.')
    check(self.draft_source in draft_layer_lib.DRAFT_SOURCES,
          f'draft_source={self.draft_source!r} is not one of '
          f'{draft_layer_lib.DRAFT_SOURCES}.')
    draft_layer = self.head_layer == 'autoregressive'
    check(self.draft_source == 'none'
          or (draft_layer and self.is_encoder_decoder),
          f'draft_source={self.draft_source!r} is the autoregressive draft '
          f'layer\'s attention over an encoder-decoder\'s source (here '
          f'head_layer={self.head_layer!r}, num_encoder_layers='
          f'{self.num_encoder_layers}): set it to \'none\'.')
    layers = self.draft_feature_layers
    check(isinstance(layers, (tuple, list)) and all(
        numeric.is_integer(i) for i in layers)
          and list(layers) == sorted(set(layers))
          and all(0 <= i < self.num_decoder_layers - 1 for i in layers),
          f'draft_feature_layers={layers!r} must be distinct ascending '
          f'decoder layers below the top one, in [0, '
          f'{self.num_decoder_layers - 2}].')
    check(not layers or draft_layer,
          f'draft_feature_layers={layers!r} are read by the autoregressive '
          f'draft layer; head_layer={self.head_layer!r}.')
    object.__setattr__(self, 'draft_feature_layers', tuple(layers))
    check(self.head_hidden is None or (numeric.is_integer(self.head_hidden)
                                       and self.head_hidden >= 1),
          f'head_hidden={self.head_hidden!r} must be an integer >= 1 (or '
          f'None for d_ff).')
    check(self.dtype in DTYPES and self.param_dtype in DTYPES,
          f'dtype={self.dtype!r} and param_dtype={self.param_dtype!r} must '
          f'be in {DTYPES}.')
    check(numeric.is_integer(self.local_attention_block)
          and self.local_attention_block >= 0,
          f'local_attention_block={self.local_attention_block!r} must be an '
          f'integer >= 0 (0: causal attention over every position).')
    check(numeric.is_integer(self.local_attention_memory)
          and self.local_attention_memory >= 0,
          f'local_attention_memory={self.local_attention_memory!r} must be '
          f'an integer >= 0.')
    check(self.local_attention_block or not self.local_attention_memory,
          f'local_attention_memory={self.local_attention_memory} needs local '
          f'attention: set local_attention_block > 0.')
    check((self.positions == 'image') == (self.image is not None),
          f'positions={self.positions!r} and image={self.image!r}: '
          f'positions=\'image\' needs image (an ImagePositions), and '
          f'image needs positions=\'image\'.')
    problems = self.image.problems(self.is_encoder_decoder, self.d_model
                                   ) if self.image is not None else []
    check(not problems, problems[0] if problems else '')
    ids = dict(pad_id=self.pad_id, eos_id=self.eos_id, bos_id=self.bos_id)
    for name, value in ids.items():
      check(numeric.is_integer(value) and 0 <= value < self.vocab_size,
            f'{name}={value!r} is outside the vocabulary [0, '
            f'{self.vocab_size}).')
    check(self.pad_id != self.eos_id,
          f'pad_id and eos_id must differ (both {self.pad_id}).')

  @classmethod
  def from_size(cls, size: str, **overrides) -> 'TransformerConfig':
    """A config of one of the named SIZES, with fields overridden."""
    if size not in SIZES:
      raise ValueError(f'unknown model size {size!r}; known: {sorted(SIZES)}.')
    return cls(**{**SIZES[size], **overrides})

  @property
  def is_encoder_decoder(self) -> bool:
    return self.num_encoder_layers > 0

  @property
  def embedding_scale(self) -> float:
    """The factor token embeddings are multiplied by (scale_embeddings)."""
    return math.sqrt(self.d_model) if self.scale_embeddings else 1.0

  @property
  def local_window(self) -> attention.LocalWindow | None:
    """The decoder's local attention pattern; None for causal attention."""
    if not self.local_attention_block:
      return None
    return attention.LocalWindow(self.local_attention_block,
                                 self.local_attention_memory)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DecodeCache:
  """Everything a decoding step reads besides the new tokens.

  Attributes:
    self_attention: one KVCache per decoder layer,
      [batch, positions, heads, head_dim].
    memory: one projected encoder output per decoder layer,
      [batch, source_length, heads, head_dim]; empty for decoder-only models.
    memory_valid: [batch, source_length] bool, False at source padding;
      None for decoder-only models.
    skip_source: [batch, source_length] the source tokens the image input
      skip reads at every step (config.image.source_skip); None otherwise.
    draft: the autoregressive draft layer's cache (same positions); None
      for the other head layers.
  """
  self_attention: tuple[attention.KVCache, ...]
  memory: tuple[attention.KVCache, ...]
  memory_valid: jax.Array | None
  skip_source: jax.Array | None = None
  draft: draft_layer_lib.DraftCache | None = None


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DecoderOutputs:
  """What a full-sequence pass gives the heads (`Transformer.run`).

  Attributes:
    hidden: [batch, T, d_model] the decoder's top outputs.
    features: [batch, T, (1 + m) * d_model] what the draft layer reads at
      each position: the top output, then the m `draft_feature_layers`'
      outputs (hidden itself when there are none).
    source: the draft layer's view of the source (draft_source other than
      'none'); None otherwise.
  """
  hidden: jax.Array
  features: jax.Array
  source: draft_layer_lib.DraftSource | None = None


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DecodingWeights:
  """Output weights laid out for decoding (`Transformer.decoding_weights`).

  Attributes:
    vocab: [d_model, vocab_size] the vocabulary projection. With tied
      embeddings this is the table transposed, once: on XLA-CPU a product
      [m, d] x [d, V] runs 2-3x faster for m = 2..15 rows than the same
      product against the [V, d] table, which XLA would also re-transpose
      inside the decoding loop on every call.
    scoring: head 1.
    proposals: heads 2..k (None for k = 1).
    embed: [vocab_size, d_model] the token embedding sequential heads read
      their predecessors' tokens with (None for other heads).
  """
  vocab: jax.Array
  scoring: heads_lib.HeadWeights
  proposals: heads_lib.HeadWeights | None
  embed: jax.Array | None = None


class FeedForward(nnx.Module):
  """d_model -> d_ff (config.activation) -> d_model."""

  def __init__(self, config: TransformerConfig, *, rngs: nnx.Rngs):
    linear = _linear_kwargs(config, rngs)
    self.up = nnx.Linear(config.d_model, config.d_ff, **linear)
    self.down = nnx.Linear(config.d_ff, config.d_model, **linear)
    self.dropout = nnx.Dropout(config.dropout_rate)
    self.activation = config.activation

  def __call__(self, x, dropout_rngs):
    hidden = _dropout(self.dropout, ACTIVATIONS[self.activation](self.up(x)),
                      dropout_rngs)
    return self.down(hidden)


class Sublayer(nnx.Module):
  """Residual connection, dropout and layer norm (pre- or post-) around f."""

  def __init__(self, config: TransformerConfig, *, rngs: nnx.Rngs):
    self.pre_norm = config.pre_norm
    self.norm = _layer_norm(config, rngs)
    self.dropout = nnx.Dropout(config.dropout_rate)

  def __call__(self, x, f, dropout_rngs):
    if self.pre_norm:
      return x + _dropout(self.dropout, f(self.norm(x)), dropout_rngs)
    return self.norm(x + _dropout(self.dropout, f(x), dropout_rngs))


class EncoderLayer(nnx.Module):
  """Bidirectional self-attention and feed-forward."""

  def __init__(self, config: TransformerConfig, *, rngs: nnx.Rngs):
    self.attention = attention.SelfAttention(
        config.d_model, config.num_heads, **_linear_kwargs(config, rngs))
    self.attention_sublayer = Sublayer(config, rngs=rngs)
    self.ffn = FeedForward(config, rngs=rngs)
    self.ffn_sublayer = Sublayer(config, rngs=rngs)

  def __call__(self, x, mask, dropout_rngs):
    x = self.attention_sublayer(x, lambda y: self.attention(y, mask),
                                dropout_rngs)
    return self.ffn_sublayer(x, lambda y: self.ffn(y, dropout_rngs),
                             dropout_rngs)


class DecoderLayer(nnx.Module):
  """Causal self-attention, cross-attention (encoder-decoder only), FFN."""

  def __init__(self, config: TransformerConfig, *, rngs: nnx.Rngs):
    kwargs = _linear_kwargs(config, rngs)
    self.attention = attention.SelfAttention(
        config.d_model, config.num_heads, **kwargs)
    self.attention_sublayer = Sublayer(config, rngs=rngs)
    if config.is_encoder_decoder:
      self.cross_attention = attention.CrossAttention(
          config.d_model, config.num_heads, **kwargs)
      self.cross_sublayer = Sublayer(config, rngs=rngs)
    self.ffn = FeedForward(config, rngs=rngs)
    self.ffn_sublayer = Sublayer(config, rngs=rngs)

  def __call__(self, x, self_attend, memory, memory_valid, dropout_rngs):
    """One layer, with the self-attention supplied by the caller.

    Args:
      x: [batch, n, d_model].
      self_attend: (attention module, normalised x) -> [batch, n, d_model];
        full causal attention in training, cached `extend` in decoding.
      memory: this layer's projected encoder output, or None.
      memory_valid: [batch, source_length] bool, or None.
      dropout_rngs: nnx.Rngs for dropout, or None for none.
    """
    x = self.attention_sublayer(x, lambda y: self_attend(self.attention, y),
                                dropout_rngs)
    if memory is not None:
      x = self.cross_sublayer(
          x, lambda y: self.cross_attention(y, memory, memory_valid),
          dropout_rngs)
    return self.ffn_sublayer(x, lambda y: self.ffn(y, dropout_rngs),
                             dropout_rngs)


class Transformer(nnx.Module):
  """Encoder-decoder or decoder-only Transformer with proposal heads."""

  def __init__(self, config: TransformerConfig, *, rngs: nnx.Rngs):
    self.config = config
    embed = lambda n: nnx.Embed(
        n, config.d_model, dtype=_dtype(config.dtype),
        param_dtype=_dtype(config.param_dtype),
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
    self.embed_dropout = nnx.Dropout(config.dropout_rate)
    self.encoder_layers = nnx.List(
        [EncoderLayer(config, rngs=rngs)
         for _ in range(config.num_encoder_layers)])
    self.decoder_layers = nnx.List(
        [DecoderLayer(config, rngs=rngs)
         for _ in range(config.num_decoder_layers)])
    if config.pre_norm:
      self.decoder_norm = _layer_norm(config, rngs)
      if config.is_encoder_decoder:
        self.encoder_norm = _layer_norm(config, rngs)
    if not config.tie_output:
      self.output = nnx.Linear(config.d_model, config.vocab_size,
                               use_bias=False, **_linear_kwargs(config, rngs))
    self.heads = heads_lib.ProposalHeads(
        config.d_model, config.num_proposal_heads,
        config.head_hidden or config.d_ff, layer=config.head_layer,
        head1_from_base=config.head1_from_base,
        attention_heads=config.num_heads,
        draft_source=config.draft_source,
        draft_extra_features=len(config.draft_feature_layers),
        dtype=_dtype(config.dtype),
        param_dtype=_dtype(config.param_dtype), rngs=rngs)

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
    x = table(tokens) * config.embedding_scale
    if config.positions == 'learned':
      x = x + (self.source_positions if source else
               self.target_positions)(positions)
    elif config.image is not None:
      image = config.image
      side = image.source_side if source else image.target_side
      x = x + positions_lib.raster_codes(positions, side, image.channels,
                                         config.d_model, x.dtype)
      x = x + self.channel_embed(positions % image.channels)
      if image.source_skip and not source:
        x = x + self.skip_embed(jnp.take_along_axis(
            source_tokens, positions_lib.source_under(positions, image),
            axis=1))
    else:
      x = x + positions_lib.sinusoidal(positions, config.d_model, x.dtype)
    return _dropout(self.embed_dropout, x, dropout_rngs)

  def head_states(self, hidden: jax.Array | DecoderOutputs, first: int,
                  count: int, next_tokens: jax.Array | None = None,
                  own_drafts: bool = False) -> jax.Array:
    """States of heads first+1 .. first+count from decoder outputs.

    Args:
      hidden: [batch, T, d_model] decoder outputs, or the `run` of a pass
        (what a draft layer that reads the source or lower layers needs).
      first: 0-based index of the first head.
      count: number of heads.
      next_tokens: [batch, T, >= first + count - 1] the tokens after each
        position (`losses.shifted_targets(target, 0, ...)`): what heads
        1, 2, ... are taken to have proposed, read by the dependent head
        layers (teacher forcing); unused by the others.
      own_drafts: dependent heads read the tokens heads 2 .. before them
        would have drafted (each state's argmax, no gradient through the
        choice: the training-time test), not next_tokens'; head 1's token
        stays next_tokens' (the base's, always accepted: the prefix).

    Returns:
      [batch, T, count, d_model].
    """
    outputs = (hidden if isinstance(hidden, DecoderOutputs)
               else DecoderOutputs(hidden, hidden))
    if self.heads.layer not in heads_lib.DEPENDENT_HEAD_LAYERS:
      return self.heads(outputs.hidden, first, count)
    if next_tokens is None:
      raise ValueError(f'{self.heads.layer} heads read the tokens before '
                       'theirs: pass next_tokens.')
    previous = self.token_embedding(
        next_tokens[..., :max(first + count - 1, 1)])
    feed = None
    if own_drafts:
      feed = lambda _, state: self.token_embedding(
          jax.lax.stop_gradient(jnp.argmax(self.logits(state), -1)))
    return self.heads(outputs.hidden, first, count, previous,
                      features=outputs.features, source=outputs.source,
                      feed=feed)

  def head_logits(self, hidden: jax.Array | DecoderOutputs, first: int,
                  count: int, next_tokens: jax.Array | None = None
                  ) -> jax.Array:
    """Logits of heads first+1 .. first+count: `head_states` through the
    vocabulary projection, [batch, T, count, vocab_size]."""
    return self.logits(self.head_states(hidden, first, count, next_tokens))

  def token_embedding(self, tokens: jax.Array) -> jax.Array:
    """[...] target tokens -> [..., d_model], scaled as the decoder's
    input embedding, without positions (what sequential heads read)."""
    return self.target_embed(tokens) * self.config.embedding_scale

  def logits(self, states: jax.Array) -> jax.Array:
    """The shared vocabulary projection: [..., d_model] -> [..., vocab]."""
    if self.config.tie_output:
      return self.target_embed.attend(states)
    return self.output(states)

  def decoding_weights(self, k: int) -> DecodingWeights:
    """The output weights of decoding with k heads, laid out once.

    Decoders take these before their loop and pass them to
    `next_token_logits` and `proposal_logits`, so that no call inside the
    loop slices parameters or transposes the vocabulary table.
    """
    if self.config.tie_output:
      vocab = self.target_embed.embedding[...].T
    else:
      vocab = self.output.kernel[...]
    dtype = _dtype(self.config.dtype)
    embed = None
    if self.heads.layer in heads_lib.DEPENDENT_HEAD_LAYERS and k > 1:
      embed = (self.target_embed.embedding[...]
               * self.config.embedding_scale).astype(dtype)
    return DecodingWeights(
        vocab=vocab.astype(dtype), scoring=self.heads.weights(0, 1),
        proposals=self.heads.weights(1, k - 1) if k > 1 else None,
        embed=embed)

  def next_token_logits(self, hidden: jax.Array,
                        weights: DecodingWeights | None = None) -> jax.Array:
    """Head 1: [..., d_model] -> [..., vocab_size].

    Args:
      hidden: decoder outputs.
      weights: from `decoding_weights` (taken here when not given).
    """
    if weights is None:
      weights = self.decoding_weights(1)
    states = heads_lib.apply_heads(weights.scoring,
                                   self._top(hidden))[..., 0, :]
    return states.astype(weights.vocab.dtype) @ weights.vocab

  def proposal_logits(self, hidden: jax.Array, k: int,
                      weights: DecodingWeights | None = None) -> jax.Array:
    """Heads 2..k: [..., d_model] -> [..., k - 1, vocab_size].

    Args:
      hidden: decoder outputs.
      k: the block size, 2 <= k <= num_proposal_heads.
      weights: from `decoding_weights(k)`, the same k (taken here when not
        given).
    """
    if weights is None:
      weights = self.decoding_weights(k)
    states = heads_lib.apply_heads(weights.proposals, self._top(hidden))
    return states.astype(weights.vocab.dtype) @ weights.vocab

  def _top(self, features: jax.Array) -> jax.Array:
    """The decoder's top output [..., d_model] of `extend`'s features
    (which carry the draft layer's lower-layer features after it)."""
    if not self.config.draft_feature_layers:
      return features
    return features[..., :self.config.d_model]

  def _draft_source(self, cache: DecodeCache):
    """The draft layer's view of the source in a decode, or None."""
    source = self.config.draft_source
    if source == 'none':
      return None
    memory = cache.memory[-1] if source == 'base' else cache.draft.source
    return draft_layer_lib.DraftSource(memory, cache.memory_valid)

  def draft(self, cache: DecodeCache, features: jax.Array,
            next_tokens: jax.Array, start: jax.Array, last: jax.Array,
            choose, k: int, weights: DecodingWeights | None = None):
    """Heads 2..k's draft made head after head (sequential heads, the
    autoregressive draft layer): `DecodingFns.draft`.

    Args:
      cache: the decoding cache (the draft layer's entries in `cache.draft`).
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
    embed = lambda tokens: weights.embed[tokens]
    project = lambda state: state.astype(weights.vocab.dtype) @ weights.vocab
    token = ops.take_at(next_tokens, last)
    proposals, logits = [], []
    if self.heads.layer == 'autoregressive':
      # Every scored position's entry (stale ones are overwritten later),
      # then one entry per drafted token, at the positions after the last
      # accepted one.
      layer, source = self.heads.draft, self._draft_source(cache)
      states, draft = layer.extend(cache.draft, layer.base_features(features),
                                   embed(next_tokens), start, source)
      state = ops.take_at(states, last)
      for index in range(k - 1):
        logits.append(project(state))
        proposals.append(choose(index, logits[-1]))
        if index < k - 2:
          state, draft = layer.extend(
              draft, state[:, None], embed(proposals[-1])[:, None],
              start + last + 1 + index, source)
          state = state[:, 0]
      cache = dataclasses.replace(cache, draft=draft)
    else:
      state, previous = ops.take_at(self._top(features), last), token
      for index in range(k - 1):
        state = heads_lib.sequential_step(weights.proposals, index, state,
                                          embed(previous))
        logits.append(project(state))
        previous = choose(index, logits[-1])
        proposals.append(previous)
    return jnp.stack(proposals, axis=1), jnp.stack(logits, axis=1), cache

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
      self_attend = lambda _, module, y: (module(y, mask), None)
    else:
      self_attend = lambda _, module, y: (module.local(y, window), None)
    features = self._decode(decoder_input, positions, memory, memory_valid,
                            dropout_rngs, self_attend, source)[0]
    draft_source = None
    if self.config.draft_source == 'base':
      draft_source = draft_layer_lib.DraftSource(memory[-1], memory_valid)
    elif self.config.draft_source == 'own':
      draft_source = draft_layer_lib.DraftSource(
          self.heads.draft.project_source(encoded), memory_valid)
    return DecoderOutputs(self._top(features), features, draft_source)

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
        attention.KVCache.zeros(batch, positions, config.num_heads,
                                config.d_model // config.num_heads,
                                _dtype(config.dtype))
        for _ in self.decoder_layers)
    skip = config.image is not None and config.image.source_skip
    draft = None
    if config.head_layer == 'autoregressive':
      draft = self.heads.draft.init_cache(batch, positions,
                                          _dtype(config.dtype), encoded)
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
    if self.config.local_window is not None:
      raise ValueError('tree verification is not served with local '
                       'attention (image models): decode with one draft.')

    def self_attend(i, module, y):
      return module.extend_tree(y, cache.self_attention[i], start, ancestors)

    hidden, layer_caches = self._decode(
        tokens, start[:, None] + depths, cache.memory or None,
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

    def move(entries):  # [batch, positions, heads, head_dim]
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


def _dropout(dropout: nnx.Dropout, x, rngs: nnx.Rngs | None):
  """Dropout in training (rngs given), identity otherwise.

  The randomness comes with each call rather than living in the modules, so
  a training step derives it from (seed, step) alone: resuming reproduces it.
  """
  if rngs is None:
    return x
  return dropout(x, deterministic=False, rngs=rngs)


def _dtype(name: str):
  return jnp.dtype(name)


def _linear_kwargs(config: TransformerConfig, rngs: nnx.Rngs) -> dict:
  return dict(dtype=_dtype(config.dtype),
              param_dtype=_dtype(config.param_dtype), rngs=rngs)


def _layer_norm(config: TransformerConfig, rngs: nnx.Rngs) -> nnx.LayerNorm:
  return nnx.LayerNorm(config.d_model, epsilon=config.layer_norm_epsilon,
                       dtype=_dtype(config.dtype),
                       param_dtype=_dtype(config.param_dtype), rngs=rngs)
