"""The architecture of a Transformer with proposal heads (TransformerConfig).

Defaults are the paper's Transformer (Vaswani et al. 2017: post- or
pre-norm LayerNorm, ReLU feed-forward, sinusoidal positions, multi-head
attention with biases). Each piece of the Llama family is one field of its
own, tested by the layers and never by a family name: `norm='rms'`,
`positions='rotary'` (with `rope_theta`, `rope_scaling`),
`feed_forward='gated'` with `activation='silu'`, `num_kv_heads` (grouped-
query attention), `head_dim`, and the biases `qkv_bias`, `out_bias`,
`ffn_bias`.
"""

import dataclasses
import math

from bpd_jax.infra import numeric
from bpd_jax.infra import schema
from bpd_jax.models import attention
from bpd_jax.models import drafters
from bpd_jax.models import feed_forward as feed_forward_lib
from bpd_jax.models import mixture as mixture_lib
from bpd_jax.models import norms as norms_lib
from bpd_jax.models import positions as positions_lib
from bpd_jax.models import rotary as rotary_lib

DTYPES = ('float32', 'bfloat16', 'float16', 'float64')
# The block drafter's most layers: far beyond any drafter's few, short of
# a typo's millions.
MAX_BLOCK_LAYERS = 64

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

# Each field's own limits (infra/schema.py), checked before the rules that
# relate several fields (`TransformerConfig.__post_init__`).
_POSITIVE = ('vocab_size', 'd_model', 'd_ff', 'num_heads', 'num_decoder_layers',
             'max_source_len', 'max_target_len', 'num_proposal_heads',
             'block_layers')
FIELDS = {
    **{name: schema.integer(1) for name in _POSITIVE},
    'num_encoder_layers': schema.integer(0),
    'head_dim': schema.integer(1, optional=True,
                               hint='(or None for d_model // num_heads)'),
    'num_kv_heads': schema.integer(1, optional=True,
                                   hint='(or None for num_heads)'),
    'head_hidden': schema.integer(1, optional=True, hint='(or None for d_ff)'),
    'local_attention_block': schema.integer(
        0, hint='(0: causal attention over every position)'),
    'local_attention_memory': schema.integer(0),
    **{name: schema.flag() for name in ('qkv_bias', 'out_bias', 'ffn_bias',
                                          'correction_recurrent')},
    'dropout_rate': schema.number(0, 1, open_high=True),
    'layer_norm_epsilon': schema.number(0, open_low=True),
    'rope_theta': schema.number(0, open_low=True),
    'activation': schema.choice(feed_forward_lib.ACTIVATIONS),
    'feed_forward': schema.choice(feed_forward_lib.FEED_FORWARDS),
    'norm': schema.choice(norms_lib.NORMS),
    'positions': schema.choice(positions_lib.POSITIONS),
    'head_layer': schema.choice(drafters.NAMES),
    'draft_source': schema.choice(drafters.DRAFT_SOURCES),
    'dtype': schema.choice(DTYPES),
    'param_dtype': schema.choice(DTYPES),
    'rope_scaling': schema.instance(rotary_lib.RopeScaling,
                                    'rotary.RopeScaling'),
    'mixture': schema.instance(mixture_lib.OutputMixture,
                               'mixture.OutputMixture'),
}


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Architecture of a Transformer with blockwise proposal heads.

  Attributes:
    vocab_size: shared source/target vocabulary size, special ids included.
    d_model: width of every layer's input and output.
    d_ff: hidden width of the position-wise feed-forward layers.
    num_heads: attention (query) heads per attention layer.
    num_kv_heads: key/value heads per attention layer, dividing num_heads:
      grouped-query attention (1: multi-query); the cache holds only these.
      None: num_heads.
    head_dim: width of one attention head; None: d_model // num_heads.
      Queries, keys and values are num_heads (num_kv_heads) * head_dim
      wide, which may differ from d_model.
    num_encoder_layers: encoder depth; 0 makes a decoder-only model.
    num_decoder_layers: decoder depth.
    dropout_rate: dropout on sublayer outputs, embeddings and the FFN hidden
      layer, in training only.
    pre_norm: layer norm before each sublayer (and after the stack) rather
      than after each residual addition.
    norm: every norm's kind (models/norms.py): 'layer' (LayerNorm) or
      'rms' (RMSNorm: no mean, no bias, as Llama).
    feed_forward: 'plain' (down(act(up(x)))) or 'gated' (down(act(gate(x))
      * up(x)), SwiGLU with activation='silu'; models/feed_forward.py).
    activation: the feed-forward layers' nonlinearity, one of ACTIVATIONS:
      'relu', 'gelu' (tanh approximation, as GPT-2) or 'silu'.
    layer_norm_epsilon: added to the variance (mean square) in every norm.
    qkv_bias: the attention layers' query, key and value projections have
      biases (Qwen2 has these alone, Llama none).
    out_bias: the attention layers' output projections have biases.
    ffn_bias: the feed-forward layers have biases.
    scale_embeddings: token embeddings are multiplied by sqrt(d_model)
      before positions are added (Vaswani et al.; GPT-2 does not), wherever
      they are read: decoder and encoder inputs, and the tokens sequential
      heads read.
    positions: 'sinusoidal' or 'learned' position embeddings, 'image':
      codes of each position's pixel in its image (models/positions.py),
      or 'rotary': queries and keys rotated by their positions in every
      self-attention layer, nothing added to the inputs (models/rotary.py).
    rope_theta: the rotary frequencies' base.
    rope_scaling: a rotary.RopeScaling ('linear' or 'llama3') stretching
      the rotary frequencies; None: none.
    max_source_len: longest source sequence the encoder accepts.
    max_target_len: most decoder positions (prompt, generated tokens and the
      k - 1 positions of a proposal block past the last one).
    share_embeddings: encoder and decoder share one token embedding.
    tie_output: the vocabulary projection is the transposed target embedding.
    mixture: a discretized logistic mixture over ordered value ids
      (models/mixture.py: image intensities) in place of the vocabulary
      projection, tied or not; None: a softmax over the vocabulary.
    num_proposal_heads: k, the number of blockwise heads (1: base model only).
    head_layer: the drafter of heads 2..k, a name of models/drafters'
      REGISTRY: 'independent' or 'joint' (the paper's heads), 'sequential'
      (heads that read the previous head's proposed token),
      'autoregressive' (a draft layer with its own cache) or 'block' (the
      whole block in one pass from the base's features).
    head_hidden: hidden width of one head's layer (the draft layer's and
      the block drafter's feed-forward layers); None means d_ff.
    head1_from_base: head 1 is the base model's next-token output, untouched.
    draft_source: where a drafter that reads an encoder-decoder's source
      attends to it: 'none', 'base' (the base's top decoder layer's
      source keys and values) or 'own' (its own projection of the encoder
      output; the draft layer's only).
    draft_feature_layers: decoder layers (0-based, below the top one)
      whose outputs the draft layer or the block drafter reads beside the
      top output (after EAGLE-3 and DFlash); () for the top alone.
    block_layers: the block drafter's layers.
    correction_recurrent: the corrected block drafter's correction also
      reads the corrected state of the position before (a recurrence
      through the block), not only its proposal.
    local_attention_block: 0 for causal attention over every earlier decoder
      position; > 0 for local 1D attention: decoder positions are cut into
      query blocks of this length (see attention.LocalWindow).
    local_attention_memory: with local attention, the positions before its
      block that a query also sees.
    image: the images of positions='image' (sides, channels, input skip);
      None with any other positions.
    pad_id: padding token id; -1 for a checkpoint without a pad token of
      its own (no vocabulary id pads): inputs are then right-padded with
      -1 and outputs are -1 past each end. Padded positions are never
      read as tokens (embeddings clamp them, losses mask them).
    eos_id: end-of-sequence token id.
    stop_ids: further ids that end a decode as eos_id does (kept in the
      output and counted in its length), e.g. Llama 3 instruct's
      <|eot_id|>: distinct vocabulary ids, none of them eos_id or pad_id.
    bos_id: first decoder input of the encoder-decoder.
    dtype: computation dtype.
    param_dtype: parameter dtype.
  """
  vocab_size: int
  d_model: int = 512
  d_ff: int = 2048
  num_heads: int = 8
  num_kv_heads: int | None = None
  head_dim: int | None = None
  num_encoder_layers: int = 6
  num_decoder_layers: int = 6
  dropout_rate: float = 0.1
  pre_norm: bool = True
  norm: str = 'layer'
  feed_forward: str = 'plain'
  activation: str = 'relu'
  layer_norm_epsilon: float = 1e-6
  qkv_bias: bool = True
  out_bias: bool = True
  ffn_bias: bool = True
  scale_embeddings: bool = True
  positions: str = 'sinusoidal'
  rope_theta: float = 10_000.0
  rope_scaling: rotary_lib.RopeScaling | None = None
  max_source_len: int = 256
  max_target_len: int = 256
  share_embeddings: bool = True
  tie_output: bool = True
  mixture: mixture_lib.OutputMixture | None = None
  num_proposal_heads: int = 1
  head_layer: str = 'independent'
  head_hidden: int | None = None
  head1_from_base: bool = True
  draft_source: str = 'none'
  draft_feature_layers: tuple[int, ...] = ()
  block_layers: int = 1
  correction_recurrent: bool = False
  local_attention_block: int = 0
  local_attention_memory: int = 0
  image: positions_lib.ImagePositions | None = None
  pad_id: int = 0
  eos_id: int = 1
  stop_ids: tuple[int, ...] = ()
  bos_id: int = 2
  dtype: str = 'float32'
  param_dtype: str = 'float32'

  def __post_init__(self):
    def check(ok, message):
      if not ok:
        raise ValueError(f'TransformerConfig: {message}')
    problem = schema.problem(FIELDS, vars(self))
    check(not problem, problem)
    # What relates several fields.
    check(self.head_dim is not None or self.d_model % self.num_heads == 0,
          f'd_model={self.d_model} must be divisible by '
          f'num_heads={self.num_heads} (or set head_dim).')
    check(self.num_heads % self.kv_heads == 0,
          f'num_kv_heads={self.num_kv_heads!r} must be an integer >= 1 '
          f'dividing num_heads={self.num_heads} (or None for num_heads).')
    check(self.rope_scaling is None or self.positions == 'rotary',
          f'rope_scaling stretches rotary positions; positions='
          f'{self.positions!r}.')
    check(self.positions != 'rotary' or self.attention_head_dim % 2 == 0,
          f'positions=\'rotary\' rotates pairs of a head\'s features: '
          f'head_dim={self.attention_head_dim} must be even.')
    check(self.local_attention_block or not self.local_attention_memory,
          f'local_attention_memory={self.local_attention_memory} needs local '
          f'attention: set local_attention_block > 0.')
    self._check_drafter(check)
    check((self.positions == 'image') == (self.image is not None),
          f'positions={self.positions!r} and image={self.image!r}: '
          f'positions=\'image\' needs image (an ImagePositions), and '
          f'image needs positions=\'image\'.')
    problems = self.image.problems(self.is_encoder_decoder, self.d_model
                                   ) if self.image is not None else []
    check(not problems, problems[0] if problems else '')
    self._check_special_ids(check)
    problems = self.mixture.problems(self.vocab_size, dict(
        pad_id=self.pad_id, eos_id=self.eos_id, bos_id=self.bos_id,
        **{f'stop_ids[{i}]': stop for i, stop in enumerate(self.stop_ids)})
                                     ) if self.mixture is not None else []
    check(not problems, problems[0] if problems else '')

  def _check_drafter(self, check) -> None:
    """The drafter's fields against the drafter and the base."""
    drafter = drafters.get(self.head_layer)
    check(self.head1_from_base or drafter.head1_through_layer,
          f'head_layer={self.head_layer!r} starts from the base model\'s '
          'own next token: head1_from_base must be True.')
    check(self.draft_source == 'none' or len(drafter.source_kinds) > 1,
          f'draft_source={self.draft_source!r}: head_layer='
          f'{self.head_layer!r} reads no source; set it to \'none\'.')
    check(self.draft_source == 'none' or self.is_encoder_decoder,
          f'draft_source={self.draft_source!r}: a decoder-only model '
          f'(num_encoder_layers=0) has no source; set it to \'none\'.')
    check(self.draft_source in drafter.source_kinds,
          f'draft_source={self.draft_source!r}: head_layer='
          f'{self.head_layer!r} reads the source through one of '
          f'{drafter.source_kinds}.')
    # A drafter is a few layers (deeper than a small base is worth
    # measuring); unbounded, a typo (1000000) builds layers until memory
    # runs out.
    check(self.block_layers <= MAX_BLOCK_LAYERS,
          f'block_layers={self.block_layers} must be at most '
          f'{MAX_BLOCK_LAYERS}: a drafter is a few layers.')
    check(not self.correction_recurrent
          or self.head_layer == 'block_corrected',
          f'correction_recurrent=True is the corrected block drafter\'s '
          f'correction; head_layer={self.head_layer!r}.')
    layers = self.draft_feature_layers
    check(isinstance(layers, (tuple, list)) and all(
        numeric.is_integer(i) for i in layers)
          and list(layers) == sorted(set(layers))
          and all(0 <= i < self.num_decoder_layers - 1 for i in layers),
          f'draft_feature_layers={layers!r} must be distinct ascending '
          f'decoder layers below the top one, in [0, '
          f'{self.num_decoder_layers - 2}].')
    check(not layers or drafter.reads_features,
          f'draft_feature_layers={layers!r} are read by the draft layer and '
          f'the block drafter; head_layer={self.head_layer!r}.')
    object.__setattr__(self, 'draft_feature_layers', tuple(layers))
    problems = drafter.problems(self)
    check(not problems, problems[0] if problems else '')

  def _check_special_ids(self, check) -> None:
    """pad, eos, bos and stop ids: vocabulary ids that keep their roles."""
    for name in ('eos_id', 'bos_id'):
      value = getattr(self, name)
      check(numeric.is_integer(value) and 0 <= value < self.vocab_size,
            f'{name}={value!r} is outside the vocabulary [0, '
            f'{self.vocab_size}).')
    check(numeric.is_integer(self.pad_id)
          and -1 <= self.pad_id < self.vocab_size,
          f'pad_id={self.pad_id!r} must be a vocabulary id in [0, '
          f'{self.vocab_size}) or -1 (no vocabulary id pads).')
    check(self.pad_id != self.eos_id,
          f'pad_id and eos_id must differ (both {self.pad_id}).')
    stops = self.stop_ids
    check(isinstance(stops, (tuple, list)) and all(
        numeric.is_integer(i) and 0 <= i < self.vocab_size for i in stops),
          f'stop_ids={stops!r} must be vocabulary ids in [0, '
          f'{self.vocab_size}).')
    check(len(set(stops)) == len(stops),
          f'stop_ids={stops!r} must be distinct.')
    check(self.eos_id not in stops,
          f'stop_ids={stops!r} must not repeat eos_id={self.eos_id}.')
    check(self.pad_id not in stops,
          f'stop_ids={stops!r} must not hold pad_id={self.pad_id}: a pad '
          f'would end every decode.')
    object.__setattr__(self, 'stop_ids', tuple(int(i) for i in stops))

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
  def kv_heads(self) -> int:
    """Key/value heads of every attention layer."""
    return self.num_kv_heads or self.num_heads

  @property
  def attention_head_dim(self) -> int:
    """Width of one attention head."""
    return self.head_dim or self.d_model // self.num_heads

  @property
  def rotary(self) -> rotary_lib.Rotary | None:
    """The self-attention layers' rotation (positions='rotary'), or None."""
    if self.positions != 'rotary':
      return None
    return rotary_lib.Rotary(self.attention_head_dim, self.rope_theta,
                             self.rope_scaling)

  @property
  def local_window(self) -> attention.LocalWindow | None:
    """The decoder's local attention pattern; None for causal attention."""
    if not self.local_attention_block:
      return None
    return attention.LocalWindow(self.local_attention_block,
                                 self.local_attention_memory)

