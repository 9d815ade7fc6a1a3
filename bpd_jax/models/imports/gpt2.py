"""GPT-2 checkpoints (GPT2LMHeadModel, GPT2Model) as a decoder-only
Transformer.

    from bpd_jax.models.imports import reader, gpt2

    checkpoint = reader.Checkpoint('/path/to/gpt2')
    model = gpt2.load(checkpoint, gpt2.config_from(checkpoint))

Tensors are named as in GPT2Model (`h.0.attn.c_attn.weight`) or, saved
from GPT2LMHeadModel, behind `transformer.`; the attention mask buffers
(`h.{i}.attn.bias`, `masked_bias`) are not read, and a stored
`lm_head.weight` must equal the token embedding (the output is tied).

GPT-2's block is the decoder-only Transformer with pre_norm=True,
positions='learned', tie_output=True, activation='gelu' (the tanh
approximation), scale_embeddings=False: x + attn(ln_1(x)),
x + mlp(ln_2(x)), ln_f after the last block, attention scaled by
1/sqrt(head_dim).

Token ids are GPT-2's own: <|endoftext|> (eos_token_id) both ends a text
and starts the next, so it is eos_id and bos_id; every id is a token, so
nothing pads (pad_id -1).
"""

import numpy as np
from flax import nnx

from bpd_jax.infra import errors
from bpd_jax.models.imports import reader
from bpd_jax.models.transformer import Transformer, TransformerConfig

# config.json's activation_function -> TransformerConfig.activation. HF's
# "gelu_new" and "gelu_pytorch_tanh" are the same tanh approximation.
ACTIVATIONS = {'gelu_new': 'gelu', 'gelu_pytorch_tanh': 'gelu',
               'relu': 'relu'}
# config.json fields whose other values change the computation in ways the
# Transformer does not model: field -> the value it supports (also the
# default when the field is absent). reorder_and_upcast_attn is not here:
# it computes the same attention in float32, as the Transformer does.
FIXED_FIELDS = {'scale_attn_weights': True,
                'scale_attn_by_inverse_layer_idx': False,
                'add_cross_attention': False, 'tie_word_embeddings': True}
# GPT2LMHeadModel saves GPT2Model's tensors under this prefix.
PREFIX = 'transformer.'
# Tensors of block i, named after 'h.{i}.', and the parameter of a
# DecoderLayer each one is. HF's Conv1D weights are [in, out], as nnx.Linear
# kernels. c_attn's 3 * d outputs are queries, keys, values, each heads x
# head_dim: the layout SelfAttention splits qkv's output into.
BLOCK_TENSORS = {
    'ln_1.weight': ('attention_sublayer', 'norm', 'scale'),
    'ln_1.bias': ('attention_sublayer', 'norm', 'bias'),
    'attn.c_attn.weight': ('attention', 'qkv', 'kernel'),
    'attn.c_attn.bias': ('attention', 'qkv', 'bias'),
    'attn.c_proj.weight': ('attention', 'out', 'kernel'),
    'attn.c_proj.bias': ('attention', 'out', 'bias'),
    'ln_2.weight': ('ffn_sublayer', 'norm', 'scale'),
    'ln_2.bias': ('ffn_sublayer', 'norm', 'bias'),
    'mlp.c_fc.weight': ('ffn', 'up', 'kernel'),
    'mlp.c_fc.bias': ('ffn', 'up', 'bias'),
    'mlp.c_proj.weight': ('ffn', 'down', 'kernel'),
    'mlp.c_proj.bias': ('ffn', 'down', 'bias'),
}
# Tensors outside the blocks and the parameters of the Transformer they are.
MODEL_TENSORS = {
    'wte.weight': ('target_embed', 'embedding'),
    'wpe.weight': ('target_positions', 'embedding'),
    'ln_f.weight': ('decoder_norm', 'scale'),
    'ln_f.bias': ('decoder_norm', 'bias'),
}
# Buffers GPT2Model stores beside its weights (the causal mask).
BUFFER_SUFFIXES = ('.attn.bias', '.attn.masked_bias')


def config_from(checkpoint: reader.Checkpoint, *, dtype: str | None = None,
                param_dtype: str | None = None,
                max_target_len: int | None = None,
                **head_fields) -> TransformerConfig:
  """The TransformerConfig of a GPT-2 folder.

  Absent fields take GPT2Config's defaults. The dropout rate is 0: the
  imported base is decoded or frozen (head_fields may set it).

  Args:
    checkpoint: the folder.
    dtype, param_dtype: computation and parameter dtypes; None: the
      checkpoint's stored dtype.
    max_target_len: most decoder positions, at most n_positions; None:
      n_positions.
    **head_fields: TransformerConfig fields the checkpoint does not fix.

  Raises:
    errors.ConfigError: not a GPT-2, or one the Transformer does not model
      (naming the field and its value).
    errors.DataError: a tensor stored in another dtype than config.json's
      (`reader.Checkpoint.check_dtypes`).
  """
  hf = checkpoint.config
  origin = f'{checkpoint.folder}/{reader.CONFIG_FILE}'
  if hf.get('model_type') != 'gpt2':
    raise errors.ConfigError(f'{origin}: model_type {hf.get("model_type")!r} '
                             f"is not GPT-2 ('gpt2').")
  for field, supported in FIXED_FIELDS.items():
    value = hf.get(field, supported)
    if value != supported:
      raise errors.ConfigError(f'{origin} has {field}={value!r}; the importer '
                               f'models only {supported!r}.')
  activation = hf.get('activation_function', 'gelu_new')
  if activation not in ACTIVATIONS:
    raise errors.ConfigError(
        f'{origin} has activation_function={activation!r}; the importer '
        f'models {sorted(ACTIVATIONS)}.')
  d_model = _size(hf, 'n_embd', 768, origin)
  positions = _size(hf, 'n_positions', 1024, origin)
  if max_target_len is not None and max_target_len > positions:
    raise errors.ConfigError(f'max_target_len={max_target_len} exceeds '
                             f'{origin}\'s n_positions={positions}.')
  stored = hf.get('dtype', hf.get('torch_dtype')) or 'float32'
  checkpoint.check_dtypes(buffers=BUFFER_SUFFIXES)
  endoftext = endoftext_id(checkpoint)
  fields = dict(
      vocab_size=_size(hf, 'vocab_size', 50257, origin), d_model=d_model,
      d_ff=hf.get('n_inner') or 4 * d_model,
      num_heads=_size(hf, 'n_head', 12, origin), num_encoder_layers=0,
      num_decoder_layers=_size(hf, 'n_layer', 12, origin),
      dropout_rate=0.0, pre_norm=True, activation=ACTIVATIONS[activation],
      layer_norm_epsilon=hf.get('layer_norm_epsilon', 1e-5),
      scale_embeddings=False, positions='learned',
      max_target_len=max_target_len or positions, tie_output=True,
      eos_id=endoftext, bos_id=endoftext, pad_id=-1,
      dtype=dtype or stored, param_dtype=param_dtype or stored)
  try:
    return TransformerConfig(**{**fields, **head_fields})
  except ValueError as e:
    raise errors.ConfigError(f'{origin}: {e}') from None


def endoftext_id(checkpoint: reader.Checkpoint) -> int:
  """GPT-2's id of <|endoftext|>: eos_token_id (bos_token_id, the same
  token in GPT-2, where eos_token_id is absent), from generation_config
  or config.json.

  Raises:
    errors.ConfigError: neither names it, they differ, or it is outside
      the vocabulary.
  """
  origin = f'{checkpoint.folder}/{reader.CONFIG_FILE}'
  ids = {}
  for source in (checkpoint.config, checkpoint.generation_config):
    ids.update({name: source[name] for name in ('eos_token_id',
                                                'bos_token_id')
                if source.get(name) is not None})
  if not ids:
    raise errors.ConfigError(f'{origin} names no eos_token_id or '
                             f'bos_token_id: <|endoftext|> is unknown.')
  vocab = _size(checkpoint.config, 'vocab_size', 50257, origin)
  for name, token in ids.items():
    if not (isinstance(token, int) and not isinstance(token, bool)
            and 0 <= token < vocab):
      raise errors.ConfigError(f'{origin} has {name}={token!r}; it must be '
                               f'an id in [0, vocab_size={vocab}).')
  if len(set(ids.values())) > 1:
    raise errors.ConfigError(
        f'{origin} has {ids}: GPT-2 has one special token, <|endoftext|>, '
        f'which both must name.')
  return next(iter(ids.values()))


def load(checkpoint: reader.Checkpoint, config: TransformerConfig,
         seed: int = 0) -> Transformer:
  """The Transformer of `config` (from `config_from`) with the folder's
  weights in its base; the proposal heads are new layers of `seed`.

  Raises:
    errors.DataError: a tensor the config implies is missing, misshapen or
      not a weight (`reader.Checkpoint.weight`: NaN, infinite, beyond
      param_dtype, or bytes of another dtype), another tensor is stored,
      or lm_head.weight differs from wte.weight.
  """
  model = Transformer(config, rngs=nnx.Rngs(seed))
  names = {name.removeprefix(PREFIX): name for name in checkpoint.names}
  taken = set()

  def put(param, name):
    stored = names.get(name)
    if stored is None:
      raise errors.DataError(f'{checkpoint.weights} has no tensor {name!r} '
                             f'(nor {PREFIX}{name}), which its config.json '
                             f'implies.')
    if checkpoint.shape(stored) != param.shape:
      raise errors.DataError(
          f'{checkpoint.file_of(stored)}: tensor {stored!r} has shape '
          f'{checkpoint.shape(stored)}; its config.json implies '
          f'{tuple(param.shape)}.')
    taken.add(stored)
    param[...] = checkpoint.weight(stored, param.dtype).astype(param.dtype)

  owners = [(model, name, path) for name, path in MODEL_TENSORS.items()]
  owners += [(layer, f'h.{i}.{name}', path)
             for i, layer in enumerate(model.decoder_layers)
             for name, path in BLOCK_TENSORS.items()]
  for owner, name, path in owners:
    param = owner
    for attribute in path:
      param = getattr(param, attribute)
    put(param, name)
  if 'lm_head.weight' in checkpoint:
    if not np.array_equal(checkpoint.tensor('lm_head.weight'),
                          checkpoint.tensor(names['wte.weight'])):
      raise errors.DataError(f'{checkpoint.weights}: lm_head.weight differs '
                             f'from wte.weight; only tied output is '
                             f'imported.')
    taken.add('lm_head.weight')
  unread = [name for name in checkpoint.names
            if name not in taken and not name.endswith(BUFFER_SUFFIXES)]
  if unread:
    raise errors.DataError(
        f'{checkpoint.weights} has {len(unread)} tensors the importer has no '
        f'place for, e.g. {unread[0]!r}: not a GPT-2 as the importer models '
        f'it.')
  return model


def _size(hf: dict, name: str, default: int, origin: str) -> int:
  """An integer size field of config.json (GPT2Config's default if absent)."""
  value = hf.get(name, default)
  if not isinstance(value, int) or isinstance(value, bool) or value < 1:
    raise errors.ConfigError(f'{origin} has {name}={value!r}; it must be an '
                             f'integer >= 1.')
  return value
