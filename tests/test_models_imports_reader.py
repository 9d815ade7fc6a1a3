"""The Hugging Face folder reader on the tiny checkpoints of
scripts/make_tiny_hf.py and make_tiny_gpt2.py: tensors byte for byte as
transformers saved them, read lazily, and every broken folder as one line."""

import hashlib
import json
import os
import shutil

import ml_dtypes
import numpy as np
import pytest
import safetensors
from safetensors import numpy as safetensors_numpy

from bpd_jax.infra import errors
from bpd_jax.models.imports import reader

DATA = os.path.join(os.path.dirname(__file__), 'data')
HF_FOLDERS = ['tiny_llama3', 'tiny_llama2', 'tiny_mistral', 'tiny_qwen2']


def references(name: str) -> dict[str, np.ndarray]:
  with np.load(os.path.join(DATA, name, 'references.npz')) as data:
    return {key: data[key] for key in data.files}


@pytest.mark.parametrize('name', HF_FOLDERS)
def test_every_tensor_is_read_as_transformers_saved_it(name):
  folder = reader.Checkpoint(os.path.join(DATA, name))
  expected = references(name)
  assert sorted(folder.names) == sorted(expected['names'].tolist())
  for tensor, digest in zip(expected['names'], expected['weights_sha256']):
    value = folder.tensor(str(tensor))
    assert value.shape == folder.shape(str(tensor))
    assert value.dtype == folder.dtype(str(tensor))
    assert hashlib.sha256(value.tobytes()).hexdigest() == digest, tensor


def test_bfloat16_is_kept_and_float32_values_are_exact():
  llama3 = reader.Checkpoint(os.path.join(DATA, 'tiny_llama3'))
  assert {llama3.dtype(name) for name in llama3.names} == {
      np.dtype(ml_dtypes.bfloat16)}
  assert llama3.shape('model.embed_tokens.weight') == (376, 64)
  assert 'lm_head.weight' not in llama3  # Tied: not stored.
  qwen2 = reader.Checkpoint(os.path.join(DATA, 'tiny_qwen2'))
  name = 'model.layers.1.self_attn.q_proj.bias'
  assert qwen2.dtype(name) == np.float32 and qwen2.shape(name) == (32,)
  stored = safetensors_numpy.load_file(qwen2.weights)
  np.testing.assert_array_equal(qwen2.tensor(name), stored[name])


@pytest.mark.parametrize('name, shapes', [
    # GQA: 4 query heads and 2 KV heads of head_dim 16 on width 32.
    ('tiny_mistral', {'model.layers.0.self_attn.q_proj.weight': (64, 32),
                      'model.layers.0.self_attn.k_proj.weight': (32, 32),
                      'model.layers.0.self_attn.o_proj.weight': (32, 64),
                      'lm_head.weight': (379, 32)}),
    # MQA: one KV head of head_dim 8.
    ('tiny_llama2', {'model.layers.1.self_attn.v_proj.weight': (8, 32),
                     'model.layers.1.mlp.gate_proj.weight': (64, 32)}),
    # Embedding rows past the tokenizer's 380 ids.
    ('tiny_qwen2', {'model.embed_tokens.weight': (384, 32),
                    'model.layers.0.self_attn.k_proj.bias': (16,)}),
])
def test_shapes_come_from_the_headers(name, shapes):
  folder = reader.Checkpoint(os.path.join(DATA, name))
  for tensor, shape in shapes.items():
    assert folder.shape(tensor) == shape, tensor


def test_shards_are_read_through_the_index():
  path = os.path.join(DATA, 'tiny_llama2')
  folder = reader.Checkpoint(path)
  assert folder.weights == os.path.join(path, reader.INDEX_FILE)
  with open(folder.weights, encoding='utf-8') as f:
    weight_map = json.load(f)['weight_map']
  assert len(set(weight_map.values())) >= 2
  assert folder.names == tuple(weight_map)
  for name, shard in weight_map.items():
    assert folder.file_of(name) == os.path.join(path, shard)


def test_config_files_are_dicts():
  llama3 = reader.Checkpoint(os.path.join(DATA, 'tiny_llama3'))
  assert llama3.config['model_type'] == 'llama'
  assert llama3.config['rope_parameters']['rope_type'] == 'llama3'
  assert llama3.generation_config['eos_token_id'] == [371, 374, 375]
  gpt2 = reader.Checkpoint(os.path.join(DATA, 'tiny_gpt2'))
  assert gpt2.config['model_type'] == 'gpt2'
  assert gpt2.generation_config == {}  # No generation_config.json.


def test_gpt2_folders_read_as_models_gpt2_reads_them():
  path = os.path.join(DATA, 'tiny_gpt2')
  folder = reader.Checkpoint(path)
  stored = safetensors_numpy.load_file(os.path.join(path, 'model.safetensors'))
  assert sorted(folder.names) == sorted(stored)
  assert 'transformer.h.0.attn.c_attn.weight' in folder
  for name, value in stored.items():
    np.testing.assert_array_equal(folder.tensor(name), value)


def test_opening_reads_headers_only(monkeypatch):
  reads = []
  original = safetensors.safe_open

  class Counting:
    def __init__(self, *args, **kwargs):
      self._file = original(*args, **kwargs)

    def __enter__(self):
      self._file.__enter__()
      return self

    def __exit__(self, *exc):
      return self._file.__exit__(*exc)

    def __getattr__(self, name):
      return getattr(self._file, name)

    def get_tensor(self, name):
      reads.append(name)
      return self._file.get_tensor(name)

  monkeypatch.setattr(safetensors, 'safe_open', Counting)
  folder = reader.Checkpoint(os.path.join(DATA, 'tiny_llama2'))
  assert folder.shape('lm_head.weight') == (379, 32) and reads == []
  folder.tensor('lm_head.weight')
  assert reads == ['lm_head.weight']


def test_is_checkpoint(tmp_path):
  assert reader.is_checkpoint(os.path.join(DATA, 'tiny_llama2'))  # Shards.
  assert reader.is_checkpoint(os.path.join(DATA, 'tiny_qwen2'))
  assert not reader.is_checkpoint(str(tmp_path))


def _copy(tmp_path, name='tiny_llama2') -> str:
  target = tmp_path / name
  shutil.copytree(os.path.join(DATA, name), target)
  return str(target)


def _write(path: str, text: str):
  with open(path, 'w', encoding='utf-8') as f:
    f.write(text)


def _edit_index(folder: str, edit):
  path = os.path.join(folder, reader.INDEX_FILE)
  with open(path, encoding='utf-8') as f:
    index = json.load(f)
  edit(index['weight_map'])
  _write(path, json.dumps(index))


def _break_missing_folder(tmp_path):
  return str(tmp_path / 'none')


def _break_missing_config(tmp_path):
  folder = _copy(tmp_path)
  os.remove(os.path.join(folder, 'config.json'))
  return folder


def _break_config_not_json(tmp_path):
  folder = _copy(tmp_path)
  _write(os.path.join(folder, 'config.json'), '{\n  "vocab_size": 3,\n}')
  return folder


def _break_config_a_list(tmp_path):
  folder = _copy(tmp_path)
  _write(os.path.join(folder, 'config.json'), '[1, 2]')
  return folder


def _break_generation_config(tmp_path):
  folder = _copy(tmp_path)
  _write(os.path.join(folder, 'generation_config.json'), '{"eos": ')
  return folder


def _break_no_weights(tmp_path):
  folder = _copy(tmp_path, 'tiny_qwen2')
  os.remove(os.path.join(folder, 'model.safetensors'))
  return folder


def _break_only_torch_weights(tmp_path):
  folder = _break_no_weights(tmp_path)
  _write(os.path.join(folder, 'pytorch_model.bin'), 'pickle')
  return folder


def _break_missing_shard(tmp_path):
  folder = _copy(tmp_path)
  os.remove(os.path.join(folder, 'model-00003-of-00004.safetensors'))
  return folder


def _break_index_names_absent_tensor(tmp_path):
  folder = _copy(tmp_path)
  _edit_index(folder, lambda weight_map: weight_map.update(
      {'model.layers.2.mlp.up_proj.weight':
       'model-00001-of-00004.safetensors'}))
  return folder


def _break_index_without_weight_map(tmp_path):
  folder = _copy(tmp_path)
  _write(os.path.join(folder, reader.INDEX_FILE), '{"metadata": {}}')
  return folder


def _break_truncated_weights(tmp_path):
  folder = _copy(tmp_path, 'tiny_qwen2')
  path = os.path.join(folder, 'model.safetensors')
  with open(path, 'rb') as f:
    data = f.read()
  with open(path, 'wb') as f:
    f.write(data[:-100])
  return folder


def _break_weights_not_safetensors(tmp_path):
  folder = _copy(tmp_path, 'tiny_qwen2')
  _write(os.path.join(folder, 'model.safetensors'), 'not a safetensors file')
  return folder


def _break_shard_header(tmp_path):
  folder = _copy(tmp_path)
  path = os.path.join(folder, 'model-00002-of-00004.safetensors')
  with open(path, 'rb') as f:
    data = bytearray(f.read())
  data[8] = ord('[')  # The header's opening brace.
  with open(path, 'wb') as f:
    f.write(bytes(data))
  return folder


@pytest.mark.parametrize('broken, error, message', [
    (_break_missing_folder, errors.MissingFileError,
     r'checkpoint folder .*/none not found'),
    (_break_missing_config, errors.MissingFileError,
     r'tiny_llama2/config.json not found'),
    (_break_config_not_json, errors.DataError,
     r'tiny_llama2/config.json is not JSON \(line 3, column 1'),
    (_break_config_a_list, errors.DataError,
     r'tiny_llama2/config.json holds a list, not a JSON object'),
    (_break_generation_config, errors.DataError,
     r'tiny_llama2/generation_config.json is not JSON \(line 1'),
    (_break_no_weights, errors.MissingFileError,
     r'tiny_qwen2 has no model.safetensors nor model.safetensors.index.json'
     r'\.$'),
    (_break_only_torch_weights, errors.MissingFileError,
     r'it has pytorch_model.bin, which is not read'),
    (_break_missing_shard, errors.MissingFileError,
     r'tiny_llama2/model-00003-of-00004.safetensors not found: '
     r'.*model.safetensors.index.json places \d+ tensors there'),
    (_break_index_names_absent_tensor, errors.DataError,
     r"tiny_llama2/model-00001-of-00004.safetensors has no tensor "
     r"'model.layers.2.mlp.up_proj.weight', which .*index.json places"),
    (_break_index_without_weight_map, errors.DataError,
     r'index.json has no weight_map'),
    (_break_truncated_weights, errors.DataError,
     r'tiny_qwen2/model.safetensors is not a whole safetensors file'),
    (_break_weights_not_safetensors, errors.DataError,
     r'tiny_qwen2/model.safetensors is not a whole safetensors file'),
    (_break_shard_header, errors.DataError,
     r'model-00002-of-00004.safetensors is not a whole safetensors file'),
])
def test_broken_folders_are_one_line_naming_the_file(tmp_path, broken, error,
                                                     message):
  with pytest.raises(error, match=message) as raised:
    reader.Checkpoint(broken(tmp_path))
  assert '\n' not in str(raised.value)


def test_an_unknown_tensor_is_one_line(tmp_path):
  folder = reader.Checkpoint(os.path.join(DATA, 'tiny_qwen2'))
  with pytest.raises(errors.DataError,
                     match=r"model.safetensors has no tensor 'lm_head.weight'"):
    folder.shape('lm_head.weight')
  shards = reader.Checkpoint(_copy(tmp_path))
  os.remove(shards.file_of('lm_head.weight'))  # Gone since it was opened.
  with pytest.raises(errors.DataError, match=r"tensor 'lm_head.weight' cannot "
                     r'be read: .*'):
    shards.tensor('lm_head.weight')
