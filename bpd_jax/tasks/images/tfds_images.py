"""Super-resolution pairs from a TFDS image dataset (CelebA), without TF.

As the paper (after Parmar et al.'s Image Transformer): each CelebA image
(218x178x3) is center-cropped to 178x178, area-downsampled to the high_res
target (32x32), and the target area-downsampled to the low_res input (8x8,
exact 4x4 block means); see tasks/images/tokens.py.

Reading goes through `tfds.data_source` as in text/tfds_translation.py (the
reasons are in its docstring). No TensorFlow is needed: TFDS parses the stored
tf.train.Example records with its own protobuf copies and decodes the JPEG
bytes of an Image feature with Pillow (or OpenCV when installed), through
`Image.decode_example_np`; the tests check that a serialized celeb_a record
decodes with TensorFlow absent. Each process reads and preprocesses only
its own contiguous shard of the training split, and saves it as .npz in the
workdir, so a resumed run starts in seconds.

The 'tfds_images' task's section, besides the image fields of
images/task.py:
  dataset: TFDS name, 'celeb_a'.
  data_dir: where `tfds build celeb_a --file_format=array_record` put it.
  splits: {our split: TFDS split}, must include 'train'; a slice such as
    'test[:256]' reads fewer (TFDS mock data ignores slices).
  mock_examples: optional, 0 (the default: the dataset), or N: TFDS mock
    data of N random images a split (no data dir needed), to try the
    pipeline without the dataset.
"""

import os
import re
from collections.abc import Mapping

import numpy as np
from absl import logging

from bpd_jax.infra import atomic_files
from bpd_jax.tasks import host_shards
from bpd_jax.tasks import spec
from bpd_jax.tasks import tfds_builders
from bpd_jax.tasks.checks import at_least, needs_train_split
from bpd_jax.tasks.images import task as task_lib
from bpd_jax.tasks.images import tokens as images_lib

_READ_CHUNK = 1_000  # Images read and downsampled at a time.
# The optional fields of the section (spec.TaskSpec.defaults): the real
# data; the image fields' own (images/task.py).
DEFAULTS = dict(task_lib.DEFAULTS, mock_examples=0)


def open_sources(dataset: str, data_dir: str, splits: Mapping[str, str],
                 high_res: int, mock_examples: int = 0,
                 feature: str = 'image') -> dict[str, 'ImageSource']:
  """{split: ImageSource} of `dataset`'s TFDS splits ({name: TFDS split}).

  Args:
    dataset: TFDS name, e.g. 'celeb_a'.
    data_dir: where `tfds build` prepared it.
    splits: our split names -> the dataset's split names.
    high_res: side of the targets: the center crop must hold it.
    mock_examples: > 0: TFDS mock data (random images of the dataset's
      shape, this many a split, no data dir needed).
    feature: the image feature.

  Raises:
    FileNotFoundError: data_dir does not exist, or the dataset is not
      prepared there (the message gives the `tfds build` command).
    ValueError: no such dataset or split, no such image feature, or images
      too small for high_res.
  """
  # The sources opened inside keep serving mock data after it.
  with tfds_builders.opened(dataset, data_dir, splits.values(),
                            mock_examples) as builder:
    features = builder.info.features
    if feature not in features:
      raise ValueError(f'{dataset} has no {feature!r} feature; features: '
                       f'{sorted(features)}.')
    shape = features[feature].shape
    side = min(shape[:2]) if None not in shape[:2] else None
    if side is not None and side < high_res:
      raise ValueError(f'{dataset} images are {shape[0]}x{shape[1]}: their '
                       f'center crop ({side}x{side}) cannot give '
                       f'task.high_res={high_res}.')
    return {name: ImageSource(builder, split, feature)
            for name, split in splits.items()}


class ImageSource:
  """Random access to the images of one split."""

  def __init__(self, builder, split: str, feature: str = 'image'):
    self.split, self._feature = split, feature
    self._data = builder.as_data_source(split=split)
    if not len(self._data):  # Stop before any work, not at evaluation.
      raise ValueError(f'split {split!r} of {builder.info.full_name} has no '
                       f'images.')

  def __len__(self) -> int:
    return len(self._data)

  def __getitem__(self, index: int) -> np.ndarray:
    """uint8 [H, W, C]: the decoded image."""
    return np.asarray(self._data[int(index)][self._feature])

  def pairs(self, indices, high_res: int,
            low_res: int) -> tuple[np.ndarray, np.ndarray]:
    """(low uint8 [N, low_res, low_res, C], high uint8 [N, high_res,
    high_res, C]) of the images at `indices`, center-cropped."""
    crops = [images_lib.center_crop(self[i]) for i in indices]
    if len({crop.shape for crop in crops}) > 1:  # Downsample one by one.
      crops = [images_lib.downsample(crop, high_res) for crop in crops]
    stacked = np.stack(crops) if crops else np.zeros(
        (0, high_res, high_res, 3), np.uint8)
    return images_lib.super_resolution_pair(stacked, high_res, low_res)


def preprocessed(source: ImageSource, high_res: int, low_res: int,
                 process_index: int = 0, process_count: int = 1,
                 cache_path: str | None = None) -> tuple[np.ndarray,
                                                         np.ndarray]:
  """This process's contiguous shard of `source` as (low, high) pairs.

  Read from `cache_path` when it exists (a resumed run); otherwise read,
  preprocessed and saved there (atomically: a temporary name, then a
  rename).

  Returns:
    (low uint8 [N, low_res, low_res, C], high uint8 [N, high_res, high_res,
    C]).
  """
  if cache_path and os.path.exists(cache_path):
    with np.load(cache_path) as arrays:
      return arrays['low'], arrays['high']
  start, end = host_shards.shard_bounds(len(source), process_index,
                                        process_count)
  logging.info('Preprocessing images %d..%d of %s (process %d of %d).',
               start, end, source.split, process_index, process_count)
  parts = []
  for first in range(start, end, _READ_CHUNK):
    parts.append(source.pairs(range(first, min(first + _READ_CHUNK, end)),
                              high_res, low_res))
    logging.log_every_n_seconds(logging.INFO, 'preprocessed %d of %d images',
                                60, first + len(parts[-1][0]) - start,
                                end - start)
  if parts:
    low, high = (np.concatenate(side) for side in zip(*parts))
  else:
    low, high = source.pairs([], high_res, low_res)
  if cache_path:
    with atomic_files.replacing(cache_path) as temp:
      np.savez(temp, low=low, high=high)
  return low, high


def _check_section(task) -> None:
  task_lib.shapes(task)
  needs_train_split(task, 'the training pairs come from it')
  if not isinstance(task.dataset, str) or not task.dataset:
    raise ValueError(f'task.dataset={task.dataset!r} must be a TFDS name, '
                     f'e.g. "celeb_a".')
  at_least(task, 'task', mock_examples=0)


def _check(config) -> None:
  _check_section(config.task)
  task_lib.check_lengths_and_eval(config)


def _load(config, workdir: str,
          train_vocab: bool = True) -> task_lib.ImageTask:
  """Splits opened; each read (and cached in WORKDIR/data/) on first use;
  a fitted reference filter (task.reference 'linear') found in the
  workdir, or fitted on the whole training split and saved there when
  `train_vocab`."""
  _check_section(config)
  image_shape, low_res_shape = task_lib.shapes(config)
  mock_examples = config.mock_examples
  high_res, low_res = config.high_res, config.low_res
  sources = open_sources(config.dataset, config.data_dir, config.splits,
                         high_res, mock_examples)

  def read(split, process_index=0, process_count=1):
    source = sources[split]
    name = re.sub(r'[^\w.-]+', '_', f'{config.dataset}'
                  f'{f".mock{mock_examples}" if mock_examples else ""}'
                  f'.{source.split}.{high_res}from{low_res}')
    cache = os.path.join(workdir, 'data', f'{name}.{process_index}-of-'
                         f'{process_count}.npz')
    return preprocessed(source, high_res, low_res, process_index,
                        process_count, cache)

  readers = {split: (lambda split=split: read(split)) for split in sources}
  task = task_lib.ImageTask(image_shape, low_res_shape, readers,
                            lambda index, count: read('train', index, count))
  task.vocab = task_lib.run_vocabulary(config, workdir, train_vocab,
                                       lambda: task.images('train'))
  return task


SPEC = spec.TaskSpec(name='tfds_images', kind='image', load=_load,
                     check=_check, defaults=DEFAULTS)
