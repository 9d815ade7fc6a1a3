"""GPT-2 import (models/imports/gpt2.py): the tiny checkpoint
(scripts/make_tiny_gpt2.py) computes what transformers recorded, with
GPT-2's own ids; blockwise decoding on it equals greedy; a broken
checkpoint stops with one line that names what is wrong."""

import json
import os
import shutil

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from safetensors import numpy as safetensors_numpy

from bpd_jax import generate
from bpd_jax.infra import errors
from bpd_jax.models import imports
from bpd_jax.models.imports import gpt2, reader

CHECKPOINT = os.path.join(os.path.dirname(__file__), 'data', 'tiny_gpt2')
K = 3


@pytest.fixture(scope='module')
def expected():
  with np.load(os.path.join(CHECKPOINT, 'expected_logits.npz')) as data:
    return dict(data)


def load(directory=CHECKPOINT, **fields):
  return imports.load_model(directory, num_proposal_heads=K, **fields)


@pytest.fixture(scope='module')
def model():
  return load()


def params(model, heads: bool) -> dict:
  """{path: array} of the model's parameters in (heads) or out of the
  proposal heads."""
  flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
  return {path: np.asarray(param[...]) for path, param in flat
          if (path[0] == 'heads') == heads}


def test_config_is_gpt2s_block_with_gpt2s_ids(model):
  config = model.config
  assert (config.num_encoder_layers, config.num_decoder_layers) == (0, 2)
  assert (config.d_model, config.d_ff, config.num_heads) == (32, 128, 4)
  assert (config.activation, config.layer_norm_epsilon) == ('gelu', 1e-5)
  assert (config.positions, config.max_target_len) == ('learned', 64)
  assert config.pre_norm and config.tie_output
  assert not config.scale_embeddings
  assert config.vocab_size == 384  # As stored: nothing added.
  # <|endoftext|> ends and starts texts; every id is a token: none pads.
  assert (config.pad_id, config.eos_id, config.bos_id) == (-1, 383, 383)


def test_logits_equal_transformers(model, expected):
  logits = model.next_token_logits(model(None, jnp.asarray(
      expected['input_ids'])))
  np.testing.assert_allclose(np.asarray(logits), expected['logits'], rtol=0,
                             atol=1e-4)


def test_qkv_is_split_as_gpt2_splits_c_attn(model):
  """SelfAttention reads qkv's output as [q | k | v], each heads x head_dim:
  GPT-2's c_attn layout, so its weight is taken as it is."""
  tensors = safetensors_numpy.load_file(os.path.join(CHECKPOINT,
                                                     'model.safetensors'))
  weight = tensors['transformer.h.1.attn.c_attn.weight']  # [d, 3d]
  bias = tensors['transformer.h.1.attn.c_attn.bias']
  x = np.random.default_rng(0).normal(size=(2, 5, 32)).astype(np.float32)
  # GPT-2: c_attn(x).split(d, dim=2), then each viewed as [.., heads, dim].
  theirs = np.split(x @ weight + bias, 3, axis=-1)
  ours = model.decoder_layers[1].attention.project(jnp.asarray(x))
  for mine, reference in zip(ours, theirs):
    np.testing.assert_allclose(mine, reference.reshape(2, 5, 4, 8),
                               rtol=1e-5, atol=1e-5)


def test_every_base_parameter_is_read_and_heads_are_seeded(model):
  other_seed = load(seed=1)
  base, other_base = params(model, False), params(other_seed, False)
  assert base.keys() == other_base.keys()
  for path, value in base.items():
    np.testing.assert_array_equal(value, other_base[path], err_msg=str(path))
  heads, other_heads = params(model, True), params(other_seed, True)
  assert any(not np.array_equal(heads[p], other_heads[p])
             for p in heads if 'w_' in str(p))
  same_seed = params(load(), True)
  for path, value in heads.items():
    np.testing.assert_array_equal(value, same_seed[path])


def test_gpt2model_layout_with_buffers_and_lm_head(tmp_path, model):
  """Tensors without `transformer.`, with the attention mask buffers and a
  tied lm_head (how other GPT-2 files are saved) give the same model."""
  tensors = safetensors_numpy.load_file(os.path.join(CHECKPOINT,
                                                     'model.safetensors'))
  tensors = {name.removeprefix('transformer.'): value
             for name, value in tensors.items()}
  tensors['lm_head.weight'] = tensors['wte.weight']
  for i in range(2):
    tensors[f'h.{i}.attn.bias'] = np.tril(np.ones((1, 1, 64, 64), bool))
    tensors[f'h.{i}.attn.masked_bias'] = np.array(-1e4, np.float32)
  reloaded = load(_copy(tmp_path, tensors=tensors))
  theirs = params(reloaded, False)
  for path, value in params(model, False).items():
    np.testing.assert_array_equal(value, theirs[path], err_msg=str(path))


def test_greedy_decoding_equals_transformers(model, expected):
  prompt = expected['prompt']
  assert prompt[0] == model.config.bos_id  # <|endoftext|> starts a text.
  result = generate.Decoder(model).greedy(prompt[None],
                                          max_len=len(expected['greedy']))
  np.testing.assert_array_equal(result.tokens[0], expected['greedy'])


@pytest.mark.parametrize('head_layer', ['independent', 'sequential'])
def test_blockwise_equals_greedy_with_fresh_heads(model, head_layer):
  """Prompts of different lengths, right-padded with -1 (no id pads), and
  <|endoftext|> inside a prompt, where it is a token like any other."""
  if head_layer != 'independent':
    model = load(head_layer=head_layer)
  bos = model.config.bos_id
  prompts = np.array([[bos, 30, 40, 50, 60, 70],
                      [bos, 7, -1, -1, -1, -1],
                      [bos, 9, bos, 250, -1, -1],
                      [bos, 0, -1, -1, -1, -1]], np.int32)
  decoder = generate.Decoder(model)
  greedy = decoder.greedy(prompts, max_len=24)
  blockwise = decoder.blockwise(prompts, k=K, max_len=24)
  np.testing.assert_array_equal(blockwise.tokens, greedy.tokens)
  np.testing.assert_array_equal(blockwise.lengths, greedy.lengths)
  # A prompt is its tokens alone: padding is not read.
  alone = decoder.greedy(prompts[1:2, :2], max_len=24)
  np.testing.assert_array_equal(alone.tokens[0], greedy.tokens[1])
  if head_layer == 'independent':  # Prompt lookup needs no heads.
    lookup = decoder.blockwise(prompts, k=K + 2, max_len=24,
                               drafter='lookup:min=1')
    np.testing.assert_array_equal(lookup.tokens, greedy.tokens)


def _copy(tmp_path, config=None, tensors=None, remove=()) -> str:
  """The tiny checkpoint copied to tmp_path/gpt2, with config.json fields
  replaced (None: deleted), its tensors replaced and files removed."""
  directory = tmp_path / 'gpt2'
  shutil.copytree(CHECKPOINT, directory)
  if config:
    path = directory / 'config.json'
    fields = {**json.loads(path.read_text()), **config}
    path.write_text(json.dumps({key: value for key, value in fields.items()
                                if value is not None}))
  if tensors is not None:
    safetensors_numpy.save_file(tensors, str(directory / 'model.safetensors'))
  for name in remove:
    os.remove(directory / name)
  return str(directory)


def _tensors(**changes):
  """The checkpoint's tensors with some replaced (None: deleted)."""
  tensors = safetensors_numpy.load_file(os.path.join(CHECKPOINT,
                                                     'model.safetensors'))
  tensors.update(changes)
  return {name: value for name, value in tensors.items() if value is not None}


@pytest.mark.parametrize('broken,error,message', [
    (dict(remove=['config.json']), errors.MissingFileError,
     r'gpt2/config.json not found: a Hugging Face model folder holds it'),
    (dict(remove=['model.safetensors']), errors.MissingFileError,
     r'gpt2 has no model.safetensors nor model.safetensors.index.json'),
    (dict(config=dict(model_type='bert')), errors.ConfigError,
     r"gpt2/config.json: model_type 'bert' is not imported; known: "),
    (dict(config=dict(scale_attn_by_inverse_layer_idx=True)),
     errors.ConfigError, r'scale_attn_by_inverse_layer_idx=True; the '
     r'importer models only False'),
    (dict(config=dict(add_cross_attention=True)), errors.ConfigError,
     r'add_cross_attention=True; the importer models only False'),
    (dict(config=dict(tie_word_embeddings=False)), errors.ConfigError,
     r'tie_word_embeddings=False'),
    (dict(config=dict(activation_function='gelu')), errors.ConfigError,
     r"activation_function='gelu'; the importer models \['gelu_new', "
     r"'gelu_pytorch_tanh', 'relu'\]"),
    (dict(config=dict(eos_token_id=None, bos_token_id=None)),
     errors.ConfigError, r'names no eos_token_id or bos_token_id'),
    (dict(config=dict(eos_token_id=5)), errors.ConfigError,
     r"'eos_token_id': 5, 'bos_token_id': 383.*one special token"),
    (dict(config=dict(bos_token_id=None, eos_token_id=384)),
     errors.ConfigError, r'eos_token_id=384; it must be an id in '
     r'\[0, vocab_size=384\)'),
    (dict(config=dict(n_head=5)), errors.ConfigError,
     r'd_model=32 must be divisible by num_heads=5'),
    (dict(config=dict(n_embd='32')), errors.ConfigError,
     r"n_embd='32'; it must be an integer >= 1"),
    (dict(tensors=_tensors(**{'transformer.h.1.mlp.c_fc.bias': None})),
     errors.DataError, r"no tensor 'h.1.mlp.c_fc.bias' \(nor "
     r'transformer.h.1.mlp.c_fc.bias\)'),
    (dict(tensors=_tensors(**{'transformer.wpe.weight': np.zeros(
        (32, 32), np.float32)})), errors.DataError,
     r"tensor 'transformer.wpe.weight' has shape \(32, 32\); its config.json implies "
     r'\(64, 32\)'),
    (dict(config=dict(vocab_size=400)), errors.DataError,
     r"tensor 'transformer.wte.weight' has shape \(384, 32\); its config.json implies "
     r'\(400, 32\)'),
    (dict(tensors=_tensors(**{'lm_head.weight': np.zeros(
        (384, 32), np.float32)})), errors.DataError,
     r'lm_head.weight differs from wte.weight'),
])
def test_broken_checkpoints_name_what_is_wrong(tmp_path, broken, error,
                                               message):
  with pytest.raises(error, match=message):
    load(_copy(tmp_path, **broken))


def test_missing_directory(tmp_path):
  with pytest.raises(errors.MissingFileError,
                     match=r'checkpoint folder .*/none not found'):
    load(str(tmp_path / 'none'))


def test_not_json_and_not_safetensors(tmp_path):
  directory = _copy(tmp_path)
  with open(os.path.join(directory, 'model.safetensors'), 'w') as f:
    f.write('not tensors')
  with pytest.raises(errors.DataError, match='is not a whole safetensors file'):
    load(directory)
  with open(os.path.join(directory, 'config.json'), 'w') as f:
    f.write('{"n_embd": 32,\n "n_head": 4,,}')
  with pytest.raises(errors.DataError, match=r'gpt2/config.json is not JSON '
                     r'\(line 2, column 14: Expecting property name'):
    load(directory)
  with open(os.path.join(directory, 'config.json'), 'wb') as f:
    f.write(b'{"model_type": "gpt\xff"}')
  with pytest.raises(errors.DataError, match=r'config.json is not JSON: byte '
                     r'0xff at offset 19 is not UTF-8'):
    load(directory)


def test_reorder_and_upcast_attn_is_the_same_model(tmp_path, model):
  """It only changes PyTorch's numerics (float32 attention scores)."""
  directory = _copy(tmp_path, config=dict(reorder_and_upcast_attn=True))
  reloaded = load(directory)
  assert reloaded.config == model.config
