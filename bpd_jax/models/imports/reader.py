"""A local Hugging Face model folder, read without torch.

    folder = reader.Checkpoint('/path/to/Llama-3.2-1B')
    folder.config['hidden_size']                    # config.json, a dict
    folder.generation_config.get('eos_token_id')    # {} when absent
    folder.shape('model.embed_tokens.weight')       # (128256, 2048), no read
    folder.dtype('model.embed_tokens.weight')       # bfloat16, no read
    folder.tensor('model.embed_tokens.weight')      # np.ndarray, read now
    folder.weight('model.embed_tokens.weight')      # read and checked

The folder is what `save_pretrained` writes or the Hub serves: config.json,
generation_config.json where present, and the weights, either one
model.safetensors or shards that model.safetensors.index.json names (its
weight_map: tensor name -> shard file). As transformers does, a folder with
both reads model.safetensors. Tensor names are as stored
(`model.layers.0.self_attn.q_proj.weight`, GPT-2's `transformer.h.0...`):
mapping them onto a model is each family importer's job.

Only the files' headers are read when a folder is opened (so every broken
shard or index shows then); a tensor is read when asked for, one at a time,
so that importing a large model does not hold the checkpoint in memory
beside the model it fills. Tensors keep their stored dtype: bfloat16 is
ml_dtypes.bfloat16 (the type jax uses), float16 is numpy's.

A header can lie about its bytes where the sizes agree: bfloat16 and
float16 are both 2 bytes, so a file that calls bfloat16 weights F16 reads
back whole, every value wrong. Importers therefore compare the headers with
config.json's dtype (`check_dtypes`, header only), and read each weight
through `weight`, which refuses NaN and infinite values and weight matrices
whose magnitudes no model has (bfloat16 weights read as float16 lie
between 0.5 and 2, float16 weights read as bfloat16 below 1e-7). A lie about
vectors alone (a norm's scales, a bias) is not detected: their values vary
too much between models to tell.

Every broken folder stops with one line naming the file
(errors.MissingFileError, errors.DataError).
"""

import os
from typing import NamedTuple

import ml_dtypes  # A dependency of jax.
import numpy as np
import safetensors

from bpd_jax.infra import errors
from bpd_jax.infra import json_files

CONFIG_FILE = 'config.json'
GENERATION_CONFIG_FILE = 'generation_config.json'
WEIGHTS_FILE = 'model.safetensors'
INDEX_FILE = 'model.safetensors.index.json'
# Weights files this reader does not read, named when a folder has only them.
UNREAD_WEIGHTS = ('pytorch_model.bin', 'pytorch_model.bin.index.json',
                  'tf_model.h5', 'flax_model.msgpack')
# safetensors' dtype names -> numpy dtypes (the ones checkpoints of the
# families imported here store).
DTYPES = {'F64': np.dtype(np.float64), 'F32': np.dtype(np.float32),
          'F16': np.dtype(np.float16), 'BF16': np.dtype(ml_dtypes.bfloat16),
          'I64': np.dtype(np.int64), 'I32': np.dtype(np.int32),
          'I16': np.dtype(np.int16), 'I8': np.dtype(np.int8),
          'U8': np.dtype(np.uint8), 'BOOL': np.dtype(np.bool_)}
# config.json's dtype names -> safetensors' names of the same dtype.
CONFIG_DTYPES = {'float64': 'F64', 'float32': 'F32', 'float16': 'F16',
                 'bfloat16': 'BF16'}
# The range of a weight matrix's median magnitude (over its nonzero values)
# that a trained or newly initialised model has: weights ~1/sqrt(width)
# and below. Bytes read as another 2-byte float fall outside it: bfloat16
# weights in [2**-15, 2) read as float16 lie in [0.5, 2), float16 weights
# below 0.25 read as bfloat16 below 1e-7.
PLAUSIBLE_MEDIAN = (1e-6, 0.5)
# Values of a matrix the median is taken over: an evenly strided sample
# (a whole tensor's median would sort it).
MEDIAN_SAMPLE = 1 << 16


class _Entry(NamedTuple):
  """Where one tensor is and what its header says."""
  path: str                # the safetensors file holding it
  shape: tuple[int, ...]
  dtype: str               # safetensors' name ('BF16')


def is_checkpoint(folder: str) -> bool:
  """Whether `folder` looks like a Hugging Face model folder (config.json
  and safetensors weights), rather than a run's workdir."""
  return os.path.isfile(os.path.join(folder, CONFIG_FILE)) and any(
      os.path.isfile(os.path.join(folder, name))
      for name in (WEIGHTS_FILE, INDEX_FILE))


class Checkpoint:
  """A Hugging Face model folder: its config files, and its tensors by name.

  Attributes:
    folder: the folder's path.
    config: config.json, as a dict.
    generation_config: generation_config.json as a dict ({} when absent).
    weights: the weights file named in messages: model.safetensors, or
      model.safetensors.index.json for shards.
  """

  def __init__(self, folder: str):
    """Reads the config files and every weights file's header.

    Raises:
      errors.MissingFileError: the folder, config.json, the weights or a
        shard the index names is missing.
      errors.DataError: a file cannot be read or is not what its name says
        (JSON, an index with a weight_map, a whole safetensors file), or a
        shard lacks a tensor the index places there.
    """
    if not os.path.isdir(folder):
      raise errors.MissingFileError(
          f'checkpoint folder {folder} not found (a Hugging Face model '
          f'folder holds {CONFIG_FILE} and {WEIGHTS_FILE} or its shards).')
    self.folder = folder
    config = os.path.join(folder, CONFIG_FILE)
    if not os.path.isfile(config):
      raise errors.MissingFileError(
          f'{config} not found: a Hugging Face model folder holds it beside '
          f'its weights.')
    self.config = json_files.read_object(config)
    generation = os.path.join(folder, GENERATION_CONFIG_FILE)
    self.generation_config = json_files.read_object(generation,
                                                    optional=True)
    single = os.path.join(folder, WEIGHTS_FILE)
    index = os.path.join(folder, INDEX_FILE)
    if os.path.isfile(single):
      self.weights = single
      self._entries = _read_header(single)
    elif os.path.isfile(index):
      self.weights = index
      self._entries = _read_shards(index)
    else:
      unread = [name for name in UNREAD_WEIGHTS
                if os.path.exists(os.path.join(folder, name))]
      found = (f'; it has {", ".join(unread)}, which is not read (convert '
               f'it to safetensors)' if unread else '')
      raise errors.MissingFileError(
          f'{folder} has no {WEIGHTS_FILE} nor {INDEX_FILE}{found}.')

  @property
  def names(self) -> tuple[str, ...]:
    """Every tensor's name, as model.safetensors lists them or in the
    index's order."""
    return tuple(self._entries)

  def __contains__(self, name: str) -> bool:
    return name in self._entries

  def shape(self, name: str) -> tuple[int, ...]:
    """The tensor's shape, from its file's header."""
    return self._entry(name).shape

  def dtype(self, name: str) -> np.dtype:
    """The tensor's stored dtype, from its file's header.

    Raises:
      errors.DataError: a dtype this reader does not read (float8).
    """
    entry = self._entry(name)
    if entry.dtype not in DTYPES:
      raise errors.DataError(
          f'{entry.path}: tensor {name!r} has dtype {entry.dtype}; the '
          f'reader reads {", ".join(DTYPES)}.')
    return DTYPES[entry.dtype]

  @property
  def config_dtype(self) -> str | None:
    """config.json's dtype (torch_dtype in files older than transformers
    5), or None where it names none."""
    return self.config.get('dtype', self.config.get('torch_dtype')) or None

  def check_dtypes(self, buffers: tuple[str, ...] = ()):
    """Checks from the headers alone that every floating tensor is stored
    in config.json's dtype, where config.json names one the reader knows.

    Args:
      buffers: ends of names of tensors not compared: buffers the model
        stores beside its weights, in a dtype of their own, and does not
        read.

    Raises:
      errors.DataError: a floating tensor stored in another dtype (the
        first, and how many), so that the header or config.json misnames
        the bytes.
    """
    expected = CONFIG_DTYPES.get(self.config_dtype)
    if expected is None:
      return
    floats = {name: entry for name, entry in self._entries.items()
              if entry.dtype in CONFIG_DTYPES.values()
              and not name.endswith(buffers)}
    other = [name for name, entry in floats.items()
             if entry.dtype != expected]
    if other:
      entry = floats[other[0]]
      raise errors.DataError(
          f'{entry.path}: tensor {other[0]!r} is stored as {entry.dtype} '
          f'(its header), but {self.folder}/{CONFIG_FILE} has dtype '
          f'{self.config_dtype!r} ({len(other)} of {len(floats)} floating '
          f'tensors differ): the header or config.json misnames the '
          f'bytes\' dtype.')

  def file_of(self, name: str) -> str:
    """The path of the safetensors file that holds the tensor."""
    return self._entry(name).path

  def tensor(self, name: str) -> np.ndarray:
    """The tensor, read from its file now, in its stored dtype and shape."""
    dtype = self.dtype(name)
    path = self._entry(name).path
    try:
      with safetensors.safe_open(path, framework='numpy') as f:
        value = f.get_tensor(name)
    except (safetensors.SafetensorError, OSError) as e:
      raise errors.DataError(f'{path}: tensor {name!r} cannot be read: '
                             f'{_one_line(e)}') from None
    if value.dtype != dtype:  # The header said otherwise: a changed file.
      raise errors.DataError(f'{path}: tensor {name!r} was read as '
                             f'{value.dtype}, its header says {dtype}.')
    return value

  def weight(self, name: str, param_dtype=None) -> np.ndarray:
    """The tensor (`tensor`), checked as a weight a model takes.

    Args:
      name: the tensor's name.
      param_dtype: the dtype of the parameter it goes into, which must hold
        every value (float16 ends at 65504); None: not checked.

    Returns:
      The tensor in its stored dtype and shape.

    Raises:
      errors.DataError: a NaN or infinite value, a value the parameter's
        dtype turns infinite, or a matrix whose median magnitude no model
        has (bytes of another dtype than the header says), naming the
        tensor and its file.
    """
    value = self.tensor(name)
    stored = self._entry(name).dtype
    # Floats by the header's name (numpy's issubdtype misses bfloat16).
    if stored not in CONFIG_DTYPES.values():
      return value
    where = f'{self._entry(name).path}: tensor {name!r}'
    finite = np.isfinite(value)
    if not finite.all():
      nans = int(np.isnan(value).sum())
      raise errors.DataError(
          f'{where} has {nans} NaN and {value.size - int(finite.sum()) - nans}'
          f' infinite values (of {value.size}): a damaged or diverged '
          f'checkpoint; every imported weight must be finite.')
    del finite
    _check_magnitudes(value, where, stored)
    if param_dtype is not None and np.dtype(param_dtype) != value.dtype:
      with np.errstate(over='ignore'):  # The overflow is the finding.
        cast = value.astype(param_dtype)
      if not np.isfinite(cast).all():
        largest = float(np.abs(value.astype(np.float64)).max())
        raise errors.DataError(
            f'{where} holds values up to {largest:.6g}, beyond '
            f'{np.dtype(param_dtype).name}\'s range (param_dtype): import it '
            f'in a wider dtype.')
    return value

  def _entry(self, name: str) -> _Entry:
    if name not in self._entries:
      raise errors.DataError(f'{self.weights} has no tensor {name!r}.')
    return self._entries[name]


def _read_header(path: str) -> dict[str, _Entry]:
  """The tensors of one safetensors file, from its header alone (the
  library checks that the header is whole and that its offsets cover the
  file exactly, so a truncated file fails here)."""
  try:
    with safetensors.safe_open(path, framework='numpy') as f:
      entries = {}
      for name in f.keys():
        view = f.get_slice(name)
        entries[name] = _Entry(path, tuple(view.get_shape()),
                               view.get_dtype())
      return entries
  except safetensors.SafetensorError as e:
    raise errors.DataError(f'{path} is not a whole safetensors file: '
                           f'{_one_line(e)}') from None
  except OSError as e:
    raise errors.DataError(f'{path} cannot be read: {_one_line(e)}') from None


def _read_shards(index: str) -> dict[str, _Entry]:
  """The tensors model.safetensors.index.json places in its shards,
  checked against each shard's header."""
  weight_map = json_files.read_object(index).get('weight_map')
  if not isinstance(weight_map, dict) or not all(
      isinstance(name, str) and isinstance(shard, str)
      for name, shard in weight_map.items()):
    raise errors.DataError(f'{index} has no weight_map of tensor names to '
                           f'shard files.')
  if not weight_map:
    raise errors.DataError(f'{index} has an empty weight_map: no tensors.')
  folder = os.path.dirname(index)
  headers = {}
  for shard in dict.fromkeys(weight_map.values()):
    path = os.path.join(folder, shard)
    if not os.path.isfile(path):
      count = sum(1 for s in weight_map.values() if s == shard)
      raise errors.MissingFileError(
          f'{path} not found: {index} places {count} tensors there.')
    headers[shard] = _read_header(path)
  entries = {}
  for name, shard in weight_map.items():
    if name not in headers[shard]:
      raise errors.DataError(f'{os.path.join(folder, shard)} has no tensor '
                             f'{name!r}, which {index} places there.')
    entries[name] = headers[shard][name]
  return entries


def _check_magnitudes(value: np.ndarray, where: str, stored: str):
  """Raises errors.DataError if `value`, a matrix of at least 2 dims,
  has a median magnitude outside PLAUSIBLE_MEDIAN (vectors are not
  checked: norm scales near 1 and biases near 0 are both plausible).

  Args:
    value: [...] the tensor as read.
    where: the file and tensor, for the message.
    stored: the header's dtype name ('F16').
  """
  if value.ndim < 2:
    return
  sample = value.reshape(-1)[::max(1, value.size // MEDIAN_SAMPLE)]
  sample = np.abs(sample.astype(np.float32))
  sample = sample[sample > 0]
  if not sample.size:
    return  # All zeros: a plausible (if useless) matrix.
  median = float(np.median(sample))
  low, high = PLAUSIBLE_MEDIAN
  if low <= median < high:
    return
  hint = ''
  if stored == 'F16' and median >= high:
    hint = ' (bfloat16 weights read as float16 give 0.5 to 2)'
  elif stored == 'BF16' and median < low:
    hint = ' (float16 weights read as bfloat16 give below 1e-7)'
  raise errors.DataError(
      f'{where} ({stored} in its header) has median magnitude {median:.3g}, '
      f'outside the {low:g} to {high:g} of weight matrices: its bytes are '
      f'not the dtype the header says{hint}.')


def _one_line(error: Exception) -> str:
  return ' '.join(str(error).split())
