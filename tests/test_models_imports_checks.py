"""Imported checkpoints that lie: a header that names another 2-byte float
than the bytes are, NaN or infinite weights, values a narrower parameter
dtype cannot hold. Each stops with one line naming the tensor and its
file, at config time where the headers show it, else while the weights are
read (before a job's first step); an intact checkpoint with buffers of
their own dtype still loads."""

import json
import os
import re
import shutil

import ml_dtypes
import numpy as np
import pytest
from safetensors import numpy as safetensors_numpy

from bpd_jax.infra import errors
from bpd_jax.models import imports
from bpd_jax.training import train

from train_configs import load_config

DATA = os.path.join(os.path.dirname(__file__), 'data')
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


def _copy(tmp_path, name: str, edit=None, **config) -> str:
  """A copy of tests/data/NAME with `edit(tensors)` applied to every
  safetensors file's {name: array} (shards one at a time) and config.json's
  fields set (None deletes one)."""
  target = str(tmp_path / name)
  shutil.copytree(os.path.join(DATA, name), target)
  if edit:
    for file in sorted(os.listdir(target)):
      if file.endswith('.safetensors'):
        path = os.path.join(target, file)
        tensors = safetensors_numpy.load_file(path)
        edit(tensors)
        safetensors_numpy.save_file(tensors, path)
  path = os.path.join(target, 'config.json')
  with open(path, encoding='utf-8') as f:
    values = json.load(f)
  for field, value in config.items():
    if value is None:
      values.pop(field, None)
    else:
      values[field] = value
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(values, f)
  return target


def _bfloat16_as_float16(tensors):
  """bfloat16 bytes under F16 headers: the same size, so the file reads."""
  for name, value in tensors.items():
    tensors[name] = value.view(np.float16)


def _float16_as_bfloat16(tensors):
  for name, value in tensors.items():
    tensors[name] = value.astype(np.float16).view(BFLOAT16)


def _one_line(error, message, call, *args, **kwargs):
  with pytest.raises(error) as raised:
    call(*args, **kwargs)
  text = str(raised.value)
  assert '\n' not in text
  assert re.search(message, text), text


def test_a_header_that_contradicts_config_json_is_refused_from_headers(
    tmp_path):
  # tiny_llama3 is bfloat16 in config.json and in its bytes.
  folder = _copy(tmp_path, 'tiny_llama3', edit=_bfloat16_as_float16)
  message = (r"tiny_llama3/model.safetensors: tensor "
             r"'model.embed_tokens.weight' is stored as F16 \(its header\), "
             r"but .*tiny_llama3/config.json has dtype 'bfloat16' \(20 of 20 "
             r"floating tensors differ\): the header or config.json misnames")
  _one_line(errors.DataError, message, imports.config_from, folder)
  # configs/hf_heads.py reads the config when the job's config is loaded:
  # the job stops there (exit 2), before any work.
  _one_line(errors.DataError, message, load_config, 'hf_heads',
            f'model={folder}')


@pytest.mark.parametrize('edit, dtype, message', [
    (_bfloat16_as_float16, None,
     r'\(F16 in its header\) has median magnitude 1\.\d+, outside the 1e-06 '
     r'to 0\.5 of weight matrices: its bytes are not the dtype the header '
     r'says \(bfloat16 weights read as float16 give 0\.5 to 2\)\.$'),
    (_bfloat16_as_float16, 'float16', r'\(F16 in its header\) has median '
     r'magnitude 1\.\d+'),
    (_float16_as_bfloat16, 'bfloat16',
     r'\(BF16 in its header\) has median magnitude \d\.\d+e-\d\d, outside '
     r'.* \(float16 weights read as bfloat16 give below 1e-7\)\.$'),
])
def test_bytes_of_another_dtype_show_in_the_magnitudes(tmp_path, edit, dtype,
                                                      message):
  """config.json names no dtype, or agrees with the lying headers: the
  first weight matrix read gives it away."""
  folder = _copy(tmp_path, 'tiny_llama3', edit=edit, dtype=dtype)
  _one_line(errors.DataError,
            r"tiny_llama3/model.safetensors: tensor 'model.embed_tokens."
            r"weight' " + message, imports.load_model, folder)


def _set(name, index, value):
  def edit(tensors):
    if name in tensors:  # The shard that holds it.
      tensors[name] = tensors[name].copy()
      tensors[name].reshape(-1)[index] = value
  return edit


@pytest.mark.parametrize('name, tensor, value, file, counts', [
    ('tiny_llama3', 'model.layers.1.mlp.up_proj.weight', np.nan,
     'model.safetensors', '1 NaN and 0 infinite values (of 8192)'),
    ('tiny_llama2', 'model.layers.0.input_layernorm.weight', -np.inf,
     'model-00002-of-00004.safetensors',
     '0 NaN and 1 infinite values (of 32)'),
    ('tiny_gpt2', 'transformer.h.1.attn.c_proj.bias', np.inf,
     'model.safetensors', '0 NaN and 1 infinite values (of 32)'),
])
def test_non_finite_weights_are_refused_naming_the_tensor(
    tmp_path, name, tensor, value, file, counts):
  folder = _copy(tmp_path, name, edit=_set(tensor, 5, value))
  assert os.path.isfile(os.path.join(folder, file))
  _one_line(errors.DataError,
            re.escape(f"{name}/{file}: tensor '{tensor}' has {counts}: a "
                      f'damaged or diverged checkpoint; every imported '
                      f'weight must be finite.'), imports.load_model, folder)


def test_values_beyond_the_parameter_dtype_are_refused(tmp_path):
  tensor = 'model.layers.0.self_attn.o_proj.weight'
  folder = _copy(tmp_path, 'tiny_mistral', edit=_set(tensor, 3, 1e5))
  imports.load_model(folder)  # float32 holds it.
  _one_line(errors.DataError, rf"tensor '{tensor}' holds values up to "
            r"100000, beyond float16's range \(param_dtype\)",
            imports.load_model, folder, param_dtype='float16')


def test_buffers_in_their_own_dtype_still_load(tmp_path):
  """Old Llama files store the rotary frequencies in float32 beside
  bfloat16 weights; the importer does not read them."""
  def add_frequencies(tensors):
    tensors['model.layers.0.self_attn.rotary_emb.inv_freq'] = np.ones(
        8, np.float32)
  folder = _copy(tmp_path, 'tiny_llama3', edit=add_frequencies)
  assert imports.load_model(folder).config.param_dtype == 'bfloat16'


def test_hf_heads_stops_at_the_imported_weights_not_at_a_nan_loss(tmp_path):
  """Non-finite imported weights would make the first loss NaN
  (`loss is nan at step 1`, blaming divergence); the warm start refuses
  them first, naming the tensor, and nothing is trained or saved."""
  tensor = 'model.layers.0.self_attn.q_proj.weight'
  folder = _copy(tmp_path, 'tiny_llama3', edit=_set(tensor, 0, np.nan))
  code = tmp_path / 'code'
  code.mkdir()
  for i in range(8):
    (code / f'm{i}.py').write_text(f'def f{i}(x):\n    return x + {i}\n')
  config = load_config('hf_heads', f'model={folder},k=2,steps=2,data={code},'
                       f'ext=.py,heads=block')
  workdir = tmp_path / 'run'
  _one_line(errors.DataError, rf"tensor '{tensor}' has 1 NaN and 0 infinite",
            train.train, config, str(workdir), log=lambda _: None)
  assert not (workdir / 'checkpoints').exists() or not os.listdir(
      workdir / 'checkpoints')
