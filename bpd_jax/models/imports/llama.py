"""Llama-family checkpoints (Llama 2 and 3, Mistral, Qwen2, SmolLM2,
TinyLlama) as a decoder-only Transformer.

    from bpd_jax.models.imports import reader, llama

    checkpoint = reader.Checkpoint('/path/to/Llama-3.2-1B')
    config = llama.config_from(checkpoint, num_proposal_heads=4)
    model = llama.load(checkpoint, config)

`LlamaForCausalLM`, `MistralForCausalLM` and `Qwen2ForCausalLM` are one
block: x + o(attn(rms(x))), x + down(silu(gate(rms(x))) * up(rms(x))),
RMSNorm after the last block, rotary positions in the layout the
Transformer uses (models/rotary.py), grouped-query attention. Their
differences are TransformerConfig fields: Qwen2 has query/key/value biases,
Llama's attention_bias and mlp_bias add biases, head_dim may differ from
hidden_size / heads, output tied or not.

config.json is read in both layouts it is found in: transformers 5's
(`rope_parameters`, `dtype`) and the Hub's older one (`rope_theta`,
`rope_scaling` with `type` or `rope_type`, `torch_dtype`). A field whose
value would make the checkpoint compute something the Transformer does not
stops the import with one line naming it (`UNMODELLED`, rope types other
than linear and llama3, layer types other than full attention). A sliding
window W that layers use caps the decoder positions at W (max_target_len),
where windowed attention is causal attention: a longer decode is refused
by generate's length check.

Token ids are the checkpoint's own (models.imports module doc).
"""

import numpy as np
from flax import nnx

from bpd_jax.infra import errors
from bpd_jax.models.imports import reader
from bpd_jax.models.rotary import RopeScaling
from bpd_jax.models.transformer import Transformer, TransformerConfig

MODEL_TYPES = ('llama', 'mistral', 'qwen2')
# Each family's attention biases when config.json names none: Qwen2's
# query, key and value projections have them (out_proj has not).
QWEN2_BIASES = dict(qkv_bias=True, out_bias=False)
# config.json fields whose other values change the computation in ways the
# Transformer does not model: field -> the values it supports (an absent
# field takes transformers' default, which is supported).
UNMODELLED = {
    'hidden_act': ('silu',),
    'pretraining_tp': (1, None),  # transformers itself ignores it today.
    'partial_rotary_factor': (1.0, 1, None),
    'attn_logit_softcapping': (None,),
    'final_logit_softcapping': (None,),
    'logits_scaling': (1.0, 1, None),
    'embedding_multiplier': (1.0, 1, None),
    'residual_multiplier': (1.0, 1, None),
}
# Tensors the Transformer does not read, by the end of their name: the
# rotary frequencies old checkpoints store (recomputed from the config).
IGNORED_SUFFIXES = ('.rotary_emb.inv_freq',)
# One decoder layer's tensors (after 'model.layers.{i}.'): the DecoderLayer
# parameter each is, and how to turn it into that parameter. torch's
# Linear weights are [out, in], nnx.Linear kernels [in, out].
LAYER_NORMS = {'input_layernorm.weight': ('attention_sublayer', 'norm',
                                          'scale'),
               'post_attention_layernorm.weight': ('ffn_sublayer', 'norm',
                                                   'scale')}
FEED_FORWARD = {'mlp.gate_proj': 'gate', 'mlp.up_proj': 'up',
                'mlp.down_proj': 'down'}
QKV = ('self_attn.q_proj', 'self_attn.k_proj', 'self_attn.v_proj')


def config_from(checkpoint: reader.Checkpoint, *, dtype: str | None = None,
                param_dtype: str | None = None,
                max_target_len: int | None = None,
                **head_fields) -> TransformerConfig:
  """The TransformerConfig of a Llama-family folder.

  Args:
    checkpoint: the folder.
    dtype: computation dtype; None: the checkpoint's stored dtype.
    param_dtype: parameter dtype; None: the checkpoint's stored dtype.
    max_target_len: most decoder positions; None: the model's
      max_position_embeddings (capped by a sliding window it uses).
    **head_fields: TransformerConfig fields the checkpoint does not fix
      (num_proposal_heads, head_layer, head_hidden, draft_feature_layers,
      dropout_rate ...).

  Raises:
    errors.ConfigError: not one of MODEL_TYPES, a field out of range, or
      one the Transformer does not model (naming the field and its value).
    errors.DataError: a tensor stored in another dtype than config.json's
      (`reader.Checkpoint.check_dtypes`).
  """
  hf = checkpoint.config
  origin = f'{checkpoint.folder}/{reader.CONFIG_FILE}'
  model_type = hf.get('model_type')
  if model_type not in MODEL_TYPES:
    raise errors.ConfigError(f'{origin}: model_type {model_type!r} is not '
                             f'one of the Llama family {MODEL_TYPES}.')
  for field, supported in UNMODELLED.items():
    if field in hf and hf[field] not in supported:
      raise errors.ConfigError(
          f'{origin} has {field}={hf[field]!r}; the importer models only '
          + ' or '.join('null' if s is None else repr(s) for s in supported)
          + '.')
  layer_types = set(hf.get('layer_types') or ())
  other = sorted(layer_types - {'full_attention', 'sliding_attention'})
  if other:
    raise errors.ConfigError(f'{origin} has layer_types with {other[0]!r}; '
                             f'the importer models full_attention and '
                             f'sliding_attention.')
  d_model = _size(hf, 'hidden_size', origin)
  heads = _size(hf, 'num_attention_heads', origin)
  positions = _size(hf, 'max_position_embeddings', origin)
  window = _sliding_window(hf, origin)
  if 'sliding_attention' in layer_types and window is None:
    raise errors.ConfigError(f'{origin} has sliding_attention layers but no '
                             f'sliding_window.')
  if window is not None:
    positions = min(positions, window)
  if max_target_len is not None:
    if max_target_len > _size(hf, 'max_position_embeddings', origin):
      raise errors.ConfigError(
          f'max_target_len={max_target_len} exceeds {origin}\'s '
          f'max_position_embeddings='
          f'{hf["max_position_embeddings"]}, the longest context it has.')
    if window is not None and max_target_len > window:
      raise errors.ConfigError(
          f'max_target_len={max_target_len} exceeds {origin}\'s '
          f'sliding_window={window}, which the importer does not model: '
          f'decodes must stay within the window.')
    positions = max_target_len
  attention_bias = _flag(hf, 'attention_bias', False, origin)
  biases = (QWEN2_BIASES if model_type == 'qwen2' else
            dict(qkv_bias=attention_bias, out_bias=attention_bias))
  stored = _stored_dtype(hf, origin)
  checkpoint.check_dtypes(buffers=IGNORED_SUFFIXES)
  theta, scaling = _rope(hf, origin)
  fields = dict(
      vocab_size=_size(hf, 'vocab_size', origin), d_model=d_model,
      d_ff=_size(hf, 'intermediate_size', origin), num_heads=heads,
      num_kv_heads=_size(hf, 'num_key_value_heads', origin, default=heads),
      head_dim=_size(hf, 'head_dim', origin, default=d_model // heads),
      num_encoder_layers=0,
      num_decoder_layers=_size(hf, 'num_hidden_layers', origin),
      dropout_rate=0.0, pre_norm=True, norm='rms', feed_forward='gated',
      activation='silu', layer_norm_epsilon=_number(hf, 'rms_norm_eps',
                                                    1e-6, origin),
      **biases, ffn_bias=_flag(hf, 'mlp_bias', False, origin),
      scale_embeddings=False, positions='rotary', rope_theta=theta,
      rope_scaling=scaling, max_target_len=positions,
      tie_output=_flag(hf, 'tie_word_embeddings', False, origin),
      **special_ids(checkpoint),
      dtype=dtype or stored, param_dtype=param_dtype or stored)
  try:
    return TransformerConfig(**{**fields, **head_fields})
  except ValueError as e:
    raise errors.ConfigError(f'{origin}: {e}') from None


def load(checkpoint: reader.Checkpoint, config: TransformerConfig,
         seed: int = 0) -> Transformer:
  """The Transformer of `config` (from `config_from`) with the folder's
  weights in its base; the proposal heads are new layers of `seed`.

  Raises:
    errors.DataError: a tensor the config implies is missing, misshapen or
      not a weight (`reader.Checkpoint.weight`: NaN, infinite, beyond
      param_dtype, or bytes of another dtype), the folder holds a tensor
      the Transformer has no place for, or a stored lm_head of a tied
      model differs from the embedding.
  """
  model = Transformer(config, rngs=nnx.Rngs(seed))
  tensors = _Tensors(checkpoint, config.param_dtype)
  embedding = model.target_embed.embedding
  _put(embedding, tensors.take('model.embed_tokens.weight', embedding.shape))
  if config.tie_output:
    if 'lm_head.weight' in checkpoint:
      if not np.array_equal(
          tensors.take('lm_head.weight', embedding.shape),
          checkpoint.tensor('model.embed_tokens.weight')):
        raise errors.DataError(
            f'{checkpoint.weights}: lm_head.weight differs from '
            f'model.embed_tokens.weight, but config.json ties them.')
  else:
    kernel = model.output.kernel
    _put(kernel, tensors.take('lm_head.weight', kernel.shape[::-1]).T)
  _put(model.decoder_norm.scale,
       tensors.take('model.norm.weight', model.decoder_norm.scale.shape))
  for i, layer in enumerate(model.decoder_layers):
    _load_layer(layer, tensors, f'model.layers.{i}.', config)
  unread = tensors.unread()
  if unread:
    raise errors.DataError(
        f'{checkpoint.weights} has {len(unread)} tensors the importer has no '
        f'place for, e.g. {unread[0]!r}: another architecture than '
        f'{checkpoint.config.get("model_type")!r} as the importer models it.')
  return model


def special_ids(checkpoint: reader.Checkpoint) -> dict:
  """The TransformerConfig ids of the checkpoint's special tokens.

  eos_id is the first end id generation_config.json (else config.json)
  names and stop_ids the others, all of which end a decode as they end
  transformers' generate. bos_id is bos_token_id (eos_id where none: a
  decoder-only text then starts after an end token). pad_id is
  pad_token_id where it is none of those, else -1: no id pads, so a
  prompt or output never confuses a real token with padding.

  Raises:
    errors.ConfigError: no end id, or an id outside the vocabulary.
  """
  origin = f'{checkpoint.folder}/{reader.CONFIG_FILE}'
  vocab = _size(checkpoint.config, 'vocab_size', origin)

  def ids(name):
    for source in (checkpoint.generation_config, checkpoint.config):
      value = source.get(name)
      if value is None or value == []:
        continue
      values = value if isinstance(value, list) else [value]
      for token in values:
        if not (isinstance(token, int) and not isinstance(token, bool)
                and 0 <= token < vocab):
          raise errors.ConfigError(
              f'{checkpoint.folder}: {name}={value!r}: ids must be integers '
              f'in [0, vocab_size={vocab}).')
      return list(dict.fromkeys(values))
    return []

  eos = ids('eos_token_id')
  if not eos:
    raise errors.ConfigError(f'{checkpoint.folder} names no eos_token_id '
                             f'(generation_config.json nor config.json): '
                             f'decodes would never end.')
  bos = (ids('bos_token_id') or eos)[0]
  pad = ids('pad_token_id')
  pad_id = pad[0] if pad and pad[0] not in (*eos, bos) else -1
  return dict(eos_id=eos[0], stop_ids=tuple(eos[1:]), bos_id=bos,
              pad_id=pad_id)


def _load_layer(layer, tensors: '_Tensors', prefix: str,
                config: TransformerConfig):
  """Writes one decoder layer's tensors into `layer` (a DecoderLayer)."""
  for name, path in LAYER_NORMS.items():
    param = _param(layer, path)
    _put(param, tensors.take(prefix + name, param.shape))
  head_dim = config.attention_head_dim
  widths = (config.num_heads * head_dim, config.kv_heads * head_dim,
            config.kv_heads * head_dim)
  attention = layer.attention
  # qkv's outputs are the queries, keys and values, each head after head:
  # q_proj, k_proj and v_proj side by side.
  _put(attention.qkv.kernel, np.concatenate([
      tensors.take(f'{prefix}{name}.weight', (width, config.d_model)).T
      for name, width in zip(QKV, widths)], axis=1))
  if config.qkv_bias:
    _put(attention.qkv.bias, np.concatenate([
        tensors.take(f'{prefix}{name}.bias', (width,))
        for name, width in zip(QKV, widths)]))
  out = attention.out
  _put(out.kernel, tensors.take(f'{prefix}self_attn.o_proj.weight',
                                out.kernel.shape[::-1]).T)
  if config.out_bias:
    _put(out.bias, tensors.take(f'{prefix}self_attn.o_proj.bias',
                                out.bias.shape))
  for name, attribute in FEED_FORWARD.items():
    linear = getattr(layer.ffn, attribute)
    _put(linear.kernel, tensors.take(f'{prefix}{name}.weight',
                                     linear.kernel.shape[::-1]).T)
    if config.ffn_bias:
      _put(linear.bias, tensors.take(f'{prefix}{name}.bias',
                                     linear.bias.shape))


class _Tensors:
  """The checkpoint's tensors, taken one at a time with their shape
  checked and read as weights of `param_dtype` (`reader.Checkpoint.weight`);
  remembers which were taken, so that the rest can be named."""

  def __init__(self, checkpoint: reader.Checkpoint, param_dtype: str):
    self.checkpoint = checkpoint
    self.param_dtype = param_dtype
    self.taken = set()

  def take(self, name: str, shape) -> np.ndarray:
    if name not in self.checkpoint:
      raise errors.DataError(
          f'{self.checkpoint.weights} has no tensor {name!r}, which '
          f'config.json implies.')
    stored = self.checkpoint.shape(name)
    if stored != tuple(shape):
      raise errors.DataError(
          f'{self.checkpoint.file_of(name)}: tensor {name!r} has shape '
          f'{stored}; config.json implies {tuple(shape)}.')
    self.taken.add(name)
    return self.checkpoint.weight(name, self.param_dtype)

  def unread(self) -> list[str]:
    return [name for name in self.checkpoint.names
            if name not in self.taken and name != 'lm_head.weight'
            and not name.endswith(IGNORED_SUFFIXES)]


def _param(owner, path):
  for name in path:
    owner = getattr(owner, name)
  return owner


def _put(param, value: np.ndarray):
  """Writes a stored tensor into a parameter, cast to the parameter's dtype
  (bfloat16 to float32 is exact)."""
  param[...] = np.asarray(value).astype(param.dtype)


def _rope(hf: dict, origin: str) -> tuple[float, RopeScaling | None]:
  """rope_theta and the scaling, from rope_parameters (transformers 5) or
  rope_theta and rope_scaling (the Hub's older config.json)."""
  parameters = hf.get('rope_parameters') or {}
  if not isinstance(parameters, dict):
    raise errors.ConfigError(f'{origin} has rope_parameters='
                             f'{parameters!r}; it must be an object.')
  scaling = hf.get('rope_scaling') or parameters
  if not isinstance(scaling, dict):
    raise errors.ConfigError(f'{origin} has rope_scaling={scaling!r}; it '
                             f'must be an object or null.')
  theta = parameters.get('rope_theta', hf.get('rope_theta', 10_000.0))
  if not (isinstance(theta, (int, float)) and not isinstance(theta, bool)
          and theta > 0):
    raise errors.ConfigError(f'{origin} has rope_theta={theta!r}; it must '
                             f'be a number > 0.')
  kind = scaling.get('rope_type', scaling.get('type', 'default'))
  try:
    if kind in (None, 'default'):
      return float(theta), None
    if kind == 'linear':
      return float(theta), RopeScaling('linear', scaling.get('factor'))
    if kind == 'llama3':
      return float(theta), RopeScaling(
          'llama3', scaling.get('factor'),
          low_freq_factor=scaling.get('low_freq_factor', 1.0),
          high_freq_factor=scaling.get('high_freq_factor', 4.0),
          original_max_positions=scaling.get(
              'original_max_position_embeddings', 8192))
  except (TypeError, ValueError) as e:
    raise errors.ConfigError(f'{origin}: {e}') from None
  raise errors.ConfigError(f'{origin} has rope type {kind!r}; the importer '
                           f'models default, linear and llama3.')


def _sliding_window(hf: dict, origin: str) -> int | None:
  """The attention window of the layers that use one, or None (Qwen2
  switches it on with use_sliding_window, in some layers; Mistral with a
  non-null sliding_window). Within the window, windowed attention is
  causal attention: the caller caps the decoder positions there."""
  if hf.get('sliding_window') is None or hf.get('use_sliding_window',
                                                True) is False:
    return None
  return _size(hf, 'sliding_window', origin)


def _stored_dtype(hf: dict, origin: str) -> str:
  dtype = hf.get('dtype', hf.get('torch_dtype')) or 'float32'
  if dtype not in ('float32', 'bfloat16', 'float16'):
    raise errors.ConfigError(f'{origin} has dtype {dtype!r}; the importer '
                             f'reads float32, bfloat16 and float16.')
  return dtype


def _size(hf: dict, name: str, origin: str, default=None) -> int:
  value = hf.get(name)
  if value is None:
    if default is None:
      raise errors.ConfigError(f'{origin} has no {name}.')
    return default
  if not isinstance(value, int) or isinstance(value, bool) or value < 1:
    raise errors.ConfigError(f'{origin} has {name}={value!r}; it must be an '
                             f'integer >= 1.')
  return value


def _number(hf: dict, name: str, default: float, origin: str) -> float:
  value = hf.get(name, default)
  if not (isinstance(value, (int, float)) and not isinstance(value, bool)
          and value > 0):
    raise errors.ConfigError(f'{origin} has {name}={value!r}; it must be a '
                             f'number > 0.')
  return float(value)


def _flag(hf: dict, name: str, default: bool, origin: str) -> bool:
  value = hf.get(name, default)
  if not isinstance(value, bool):
    raise errors.ConfigError(f'{origin} has {name}={value!r}; it must be '
                             f'true or false.')
  return value
