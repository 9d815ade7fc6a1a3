"""A pretrained GPT-2 from a local Hugging Face checkpoint, as a Transformer.

    from bpd_jax import generate
    from bpd_jax.models import gpt2
    from bpd_jax.tasks.text import gpt2_vocab

    model = gpt2.load_gpt2('/path/to/gpt2', num_proposal_heads=4)
    vocab = gpt2_vocab.GPT2Vocabulary('/path/to/gpt2')
    prompt = [[model.config.bos_id] + vocab.encode('The meaning of life')]
    out = generate.Decoder(model).greedy(prompt, max_len=20)
    text = vocab.decode(out.tokens[0])

The directory is what `save_pretrained` writes or the Hub serves:
config.json and model.safetensors (vocab.json and merges.txt for the
tokenizer). The tensors are read with safetensors' numpy API (no torch),
named as in GPT2Model (`h.0.attn.c_attn.weight`) or, saved from
GPT2LMHeadModel, behind `transformer.`; the attention mask buffers
(`h.{i}.attn.bias`, `masked_bias`) and any other tensor are not read, and a
stored `lm_head.weight` must equal the token embedding (tied output).

GPT-2's block is the decoder-only Transformer with pre_norm=True,
positions='learned', tie_output=True, activation='gelu' (the tanh
approximation), layer_norm_epsilon=1e-5 and scale_embeddings=False:
x + attn(ln_1(x)), x + mlp(ln_2(x)), ln_f after the last block, attention
scaled by 1/sqrt(head_dim). The base model is exactly GPT-2; the proposal
heads blockwise decoding adds are new, seeded random layers to be trained.

Token ids (infra/gpt2_ids.py): <|endoftext|> is eos 1, the other GPT-2
ids follow from 4 on, and the vocabulary grows by 3. The embedding rows of
pad 0, bos 2 and unk 3 are the mean of GPT-2's token embeddings (the usual
initialisation of added tokens): with the tied output such a row's logit
is the mean of GPT-2's logits, never above their maximum, so greedy and
blockwise decoding pick what GPT-2 picks. A softmax over the 3 extra
logits lowers every GPT-2 token's log-probability by the same amount, at
most log(1 + 3 / GPT-2's vocabulary size) (6e-5 nats for GPT-2).

The config's bos_id is eos 1 (<|endoftext|>): GPT-2 saw each text after an
<|endoftext|>, so a prompt starts with it, and training and scoring, which
put bos_id before a decoder-only sequence (losses.shift_right), feed the
token GPT-2 knows rather than the untrained mean row of bos 2.
"""

import functools
import json
import os

import numpy as np
import safetensors
from flax import nnx
from safetensors import numpy as safetensors_numpy

from bpd_jax.infra import errors
from bpd_jax.models.transformer import Transformer, TransformerConfig
from bpd_jax.infra import gpt2_ids
from bpd_jax.infra import token_ids

CONFIG_FILE = 'config.json'
WEIGHTS_FILE = 'model.safetensors'
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
# Tensors outside the blocks and the parameters of the Transformer they are
# (wte, whose rows move to the project's ids, is placed apart).
MODEL_TENSORS = {
    'wpe.weight': ('target_positions', 'embedding'),
    'ln_f.weight': ('decoder_norm', 'scale'),
    'ln_f.bias': ('decoder_norm', 'bias'),
}


def load_gpt2(directory: str, *, num_proposal_heads: int = 1,
              head_layer: str = 'independent',
              head_hidden: int | None = None,
              draft_feature_layers: tuple[int, ...] = (),
              dtype: str = 'float32', param_dtype: str = 'float32',
              seed: int = 0) -> Transformer:
  """The GPT-2 checkpoint in `directory` as a decoder-only Transformer.

  Args:
    directory: holds config.json and model.safetensors.
    num_proposal_heads: k, the blockwise heads (1: the base model alone).
    head_layer, head_hidden, draft_feature_layers: the heads' layer
      (TransformerConfig).
    dtype: computation dtype.
    param_dtype: parameter dtype (the tensors are cast to it).
    seed: initialises the proposal heads, the only parameters not read.

  Raises:
    errors.MissingFileError: the directory or one of its files is missing.
    errors.ConfigError: config.json is not a GPT-2 the Transformer models.
    errors.DataError: a file cannot be read, or a tensor is missing or has
      a shape other than config.json implies.
  """
  hf_config = read_config(directory)
  origin = os.path.join(directory, CONFIG_FILE)
  config = config_from_hf(
      hf_config, num_proposal_heads=num_proposal_heads,
      head_layer=head_layer, head_hidden=head_hidden,
      draft_feature_layers=draft_feature_layers, dtype=dtype,
      param_dtype=param_dtype, origin=origin)
  path = _existing(directory, WEIGHTS_FILE)
  model = Transformer(config, rngs=nnx.Rngs(seed))
  _load_base(model, _read_tensors(path), endoftext_id(hf_config, origin),
             path)
  return model


def is_checkpoint(directory: str) -> bool:
  """Whether `directory` is a Hugging Face GPT-2 folder (config.json and
  model.safetensors), rather than a run's workdir."""
  return all(os.path.isfile(os.path.join(directory, name))
             for name in (CONFIG_FILE, WEIGHTS_FILE))


def read_config(directory: str) -> dict:
  """config.json of a checkpoint directory, as a dict."""
  if not os.path.isdir(directory):
    raise errors.MissingFileError(
        f'GPT-2 checkpoint directory {directory} not found.')
  path = _existing(directory, CONFIG_FILE)
  try:
    with open(path, encoding='utf-8') as f:
      hf_config = json.load(f)
  except json.JSONDecodeError as e:
    raise errors.DataError(f'{path} is not JSON (line {e.lineno}, column '
                           f'{e.colno}: {e.msg}).') from None
  except UnicodeDecodeError as e:
    raise errors.DataError(f'{path} is not JSON: byte {e.object[e.start]:#04x} '
                           f'at offset {e.start} is not UTF-8.') from None
  except OSError as e:
    raise errors.DataError(f'{path} cannot be read: {e.strerror}.') from None
  if not isinstance(hf_config, dict):
    raise errors.DataError(f'{path} holds a {type(hf_config).__name__}, not '
                           f'a JSON object.')
  return hf_config


def endoftext_id(hf_config: dict, origin: str = CONFIG_FILE) -> int:
  """GPT-2's id of <|endoftext|>: config.json's eos_token_id (its
  bos_token_id, the same token in GPT-2, where eos_token_id is absent)."""
  ids = {name: hf_config[name] for name in ('eos_token_id', 'bos_token_id')
         if hf_config.get(name) is not None}
  if not ids:
    raise errors.ConfigError(f'{origin} names no eos_token_id or '
                             f'bos_token_id: <|endoftext|> is unknown.')
  vocab = _field(hf_config, 'vocab_size', 50257, origin)
  for name, token in ids.items():
    if not isinstance(token, int) or not 0 <= token < vocab:
      raise errors.ConfigError(f'{origin} has {name}={token!r}; it must be '
                               f'an id in [0, vocab_size={vocab}).')
  if len(set(ids.values())) > 1:
    raise errors.ConfigError(
        f'{origin} has {ids}: GPT-2 has one special token, <|endoftext|>, '
        f'which both must name.')
  return next(iter(ids.values()))


def config_from_hf(hf_config: dict, *, num_proposal_heads: int = 1,
                   head_layer: str = 'independent',
                   head_hidden: int | None = None,
                   draft_feature_layers: tuple[int, ...] = (),
                   dtype: str = 'float32', param_dtype: str = 'float32',
                   origin: str = CONFIG_FILE) -> TransformerConfig:
  """The TransformerConfig of a GPT-2 config.json (as a dict).

  Absent fields take GPT2Config's defaults. The dropout rate is GPT-2's
  resid_pdrop (it applies in training only).

  Args:
    hf_config: the parsed config.json.
    num_proposal_heads, head_layer, head_hidden, draft_feature_layers,
      dtype, param_dtype: the TransformerConfig fields the checkpoint does
      not fix.
    origin: the file named in error messages.

  Raises:
    errors.ConfigError: not a GPT-2, or one the Transformer does not model
      (naming the field and its value).
  """
  model_type = hf_config.get('model_type')
  if model_type != 'gpt2':
    raise errors.ConfigError(f'{origin}: model_type {model_type!r} is not '
                             f"GPT-2 ('gpt2'); only GPT-2 checkpoints are "
                             f'imported.')
  for field, supported in FIXED_FIELDS.items():
    value = hf_config.get(field, supported)
    if value != supported:
      raise errors.ConfigError(f'{origin} has {field}={value!r}; the importer '
                               f'supports only {supported!r}.')
  activation = hf_config.get('activation_function', 'gelu_new')
  if activation not in ACTIVATIONS:
    raise errors.ConfigError(
        f'{origin} has activation_function={activation!r}; the importer '
        f'supports {sorted(ACTIVATIONS)}.')
  endoftext_id(hf_config, origin)  # Checked here, used by the loader.
  d_model = _field(hf_config, 'n_embd', 768, origin)
  try:
    return TransformerConfig(
        vocab_size=gpt2_ids.vocab_size(
            _field(hf_config, 'vocab_size', 50257, origin)),
        d_model=d_model,
        d_ff=hf_config.get('n_inner') or 4 * d_model,
        num_heads=_field(hf_config, 'n_head', 12, origin),
        num_encoder_layers=0,
        num_decoder_layers=_field(hf_config, 'n_layer', 12, origin),
        dropout_rate=hf_config.get('resid_pdrop', 0.1),
        pre_norm=True, activation=ACTIVATIONS[activation],
        layer_norm_epsilon=hf_config.get('layer_norm_epsilon', 1e-5),
        scale_embeddings=False, positions='learned',
        max_target_len=_field(hf_config, 'n_positions', 1024, origin),
        tie_output=True, num_proposal_heads=num_proposal_heads,
        head_layer=head_layer, head_hidden=head_hidden,
        draft_feature_layers=tuple(draft_feature_layers),
        # <|endoftext|> both ends a text and starts the next (module doc).
        eos_id=token_ids.EOS_ID, bos_id=token_ids.EOS_ID,
        pad_id=token_ids.PAD_ID, dtype=dtype, param_dtype=param_dtype)
  except ValueError as e:
    raise errors.ConfigError(f'{origin}: {e}') from None


def _field(hf_config: dict, name: str, default: int, origin: str) -> int:
  """An integer size field of config.json (GPT2Config's default if absent)."""
  value = hf_config.get(name, default)
  if not isinstance(value, int) or isinstance(value, bool) or value < 1:
    raise errors.ConfigError(f'{origin} has {name}={value!r}; it must be an '
                             f'integer >= 1.')
  return value


def _existing(directory: str, name: str) -> str:
  path = os.path.join(directory, name)
  if not os.path.isfile(path):
    raise errors.MissingFileError(
        f'{path} not found: a GPT-2 checkpoint directory holds '
        f'{CONFIG_FILE} and {WEIGHTS_FILE} (as save_pretrained writes them).')
  return path


def _read_tensors(path: str) -> dict[str, np.ndarray]:
  """The file's tensors by GPT2Model name (without `transformer.`)."""
  try:
    tensors = safetensors_numpy.load_file(path)
  except safetensors.SafetensorError as e:
    raise errors.DataError(f'{path} is not a safetensors file: {e}') from None
  return {name.removeprefix(PREFIX): value for name, value in tensors.items()}


def _load_base(model: Transformer, tensors: dict[str, np.ndarray],
               endoftext: int, origin: str):
  """Writes GPT-2's tensors into every parameter of `model` but the heads."""

  def tensor(name, shape):
    if name not in tensors:
      raise errors.DataError(f'{origin} has no tensor {name!r} (nor '
                             f'{PREFIX}{name}), which its config.json '
                             f'implies.')
    value = tensors[name]
    if value.shape != tuple(shape):
      raise errors.DataError(f'{origin}: tensor {name!r} has shape '
                             f'{value.shape}; its config.json implies '
                             f'{tuple(shape)}.')
    return value

  def put(param, value):
    param[...] = np.asarray(value, param.dtype)

  table = model.target_embed.embedding
  d_model = table.shape[1]
  gpt2_vocab = table.shape[0] - len(gpt2_ids.UNUSED_IDS)
  wte = tensor('wte.weight', (gpt2_vocab, d_model))
  if 'lm_head.weight' in tensors and not np.array_equal(
      tensors['lm_head.weight'], wte):
    raise errors.DataError(f'{origin}: lm_head.weight differs from '
                           f'wte.weight; only tied output is imported.')
  rows = np.empty((table.shape[0], d_model), np.float64)
  rows[gpt2_ids.from_gpt2(np.arange(gpt2_vocab), endoftext)] = wte
  rows[list(gpt2_ids.UNUSED_IDS)] = wte.mean(axis=0, dtype=np.float64)
  put(table, rows)
  owners = [(model, name, path) for name, path in MODEL_TENSORS.items()]
  owners += [(layer, f'h.{i}.{name}', path)
             for i, layer in enumerate(model.decoder_layers)
             for name, path in BLOCK_TENSORS.items()]
  for owner, name, path in owners:
    param = functools.reduce(getattr, path, owner)
    put(param, tensor(name, param.shape))
