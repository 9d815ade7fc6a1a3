"""A local Hugging Face model folder, read without torch.

    folder = reader.Checkpoint('/path/to/Llama-3.2-1B')
    folder.config['hidden_size']                    # config.json, a dict
    folder.generation_config.get('eos_token_id')    # {} when absent
    folder.shape('model.embed_tokens.weight')       # (128256, 2048), no read
    folder.dtype('model.embed_tokens.weight')       # bfloat16, no read
    folder.tensor('model.embed_tokens.weight')      # np.ndarray, read now

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


def _one_line(error: Exception) -> str:
  return ' '.join(str(error).split())
