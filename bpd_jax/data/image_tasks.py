"""Super-resolution tasks: low-resolution inputs, high-resolution targets.

An ImageTask serves what a text Task serves to training and decoding
(vocab, encoded pairs, this process's training share, sources to decode),
with images instead of sentences: a source is to_tokens(low-res input) and
a target to_tokens(high-res target), both WITHOUT eos (an image has a fixed
length: decoding runs exactly H*W*C tokens). The task sections it is loaded
from are documented in bpd_jax/data/tasks.py.
"""

import collections.abc
import dataclasses
import os
import re
from typing import Callable

import numpy as np

from bpd_jax.data import embedded_images
from bpd_jax.data import images as images_lib
from bpd_jax.data import tfds_translation

ImagePair = tuple[np.ndarray, np.ndarray]  # (low uint8 [N,h,w,C], high ...).


class ImagePairs(collections.abc.Sequence):
  """(source ids, target ids) of images, tokenized on access.

  Holding uint8 images rather than int32 ids keeps a split at a quarter of
  the memory (CelebA's 162k training targets: 0.5 GB, not 2 GB).
  """

  def __init__(self, low: np.ndarray, high: np.ndarray):
    if len(low) != len(high):
      raise ValueError(f'{len(low)} inputs but {len(high)} targets.')
    self.low, self.high = low, high

  def __len__(self) -> int:
    return len(self.low)

  def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
    """(int32 [h*w*C] source ids, int32 [H*W*C] target ids)."""
    return (images_lib.to_tokens(self.low[index]),
            images_lib.to_tokens(self.high[index]))

  def lengths(self) -> tuple[np.ndarray, np.ndarray]:
    """[len(self)] source and target lengths (as EncodedPairs.lengths)."""
    return (np.full(len(self), self.low[0].size if len(self) else 0),
            np.full(len(self), self.high[0].size if len(self) else 0))


@dataclasses.dataclass
class ImageTask:
  """Super-resolution pairs by split.

  Attributes:
    image_shape: (H, W, C) of the targets.
    low_res_shape: (h, w, C) of the inputs.
    readers: {split: () -> (low, high)}, each read on first use.
    train_shard: (process_index, process_count) -> that process's (low,
      high) training share, read by that process alone; None: a contiguous
      share of images('train').
    vocab: pad / eos / bos and the 256 intensities.
  """
  image_shape: tuple[int, int, int]
  low_res_shape: tuple[int, int, int]
  readers: dict[str, Callable[[], ImagePair]]
  train_shard: Callable[[int, int], ImagePair] | None = None
  vocab: images_lib.ImageVocabulary = dataclasses.field(
      default_factory=images_lib.ImageVocabulary)

  def __post_init__(self):
    self._read = {}

  @property
  def splits(self) -> tuple[str, ...]:
    return tuple(self.readers)

  def images(self, split: str, limit: int = 0) -> ImagePair:
    """(low uint8 [N, h, w, C], high uint8 [N, H, W, C]); the first `limit`
    pairs (0: all)."""
    if split not in self.readers:
      raise ValueError(f'split {split!r} is not one of {sorted(self.readers)}.')
    if split not in self._read:
      self._read[split] = self.readers[split]()
    low, high = self._read[split]
    return low[:limit or None], high[:limit or None]

  def encoded(self, split: str) -> ImagePairs:
    """(source ids [h*w*C], target ids [H*W*C]) of a split, no eos."""
    return ImagePairs(*self.images(split))

  def train_examples(self, process_index: int = 0,
                     process_count: int = 1) -> ImagePairs:
    """This process's share of the encoded training pairs."""
    if self.train_shard is not None:
      return ImagePairs(*self.train_shard(process_index, process_count))
    low, high = self.images('train')
    start, end = tfds_translation.shard_bounds(len(low), process_index,
                                               process_count)
    return ImagePairs(low[start:end], high[start:end])

  def sources(self, split: str, max_len: int,
              limit: int = 0) -> tuple[list[list[int]], int]:
    """Source ids to decode (no eos), and 0: an image is never cut.

    Args:
      split: split name.
      max_len: the model's max_source_len.
      limit: the first this many images (0: all).

    Raises:
      ValueError: an input image is longer than max_len (cutting an image
        would silently change the task).
    """
    length = int(np.prod(self.low_res_shape))
    if length > max_len:
      raise ValueError(f'{"x".join(map(str, self.low_res_shape))} input '
                       f'images are {length} tokens; max_len={max_len} (the '
                       f'model\'s max_source_len) must be at least that.')
    low, _ = self.images(split, limit)
    return images_lib.to_tokens(low).tolist(), 0


def load(config, workdir: str) -> ImageTask:
  """The 'embedded_images' or 'tfds_images' task of a `task` config section.

  Raises:
    FileNotFoundError: the TFDS data dir or prepared dataset is missing.
    ValueError: a bad field, split or dataset, before any reading.
  """
  high_res, low_res = config.high_res, config.low_res
  if not (isinstance(high_res, int) and isinstance(low_res, int) and
          1 <= low_res <= high_res and high_res % low_res == 0):
    raise ValueError(f'task.high_res={high_res!r} must be a multiple of '
                     f'task.low_res={low_res!r} (positive integers).')
  shapes = (high_res, high_res, 3), (low_res, low_res, 3)
  if config.name == 'embedded_images':
    unknown = set(config.sizes) - set(embedded_images.SPLITS)
    if unknown:
      raise ValueError(f'task.sizes has splits {sorted(unknown)}; the '
                       f'embedded photos have {embedded_images.SPLITS}.')
    scales = tuple(config.get('scales', embedded_images.DEFAULT_SCALES))
    seed = config.get('seed', 0)
    readers = {split: (lambda split=split, count=count: embedded_images.crops(
        split, count, high_res, low_res, scales, seed))
               for split, count in config.sizes.items()}
    return ImageTask(*shapes, readers)
  return _tfds_task(config, workdir, *shapes)


def _tfds_task(config, workdir: str, image_shape, low_res_shape) -> ImageTask:
  from bpd_jax.data import tfds_images  # TFDS imports only when used.
  if 'train' not in config.splits:
    raise ValueError(f'task.splits={dict(config.splits)} needs a "train" '
                     f'entry: the training pairs come from it.')
  mock_examples = config.get('mock_examples', 0)
  high_res, low_res = image_shape[0], low_res_shape[0]
  sources = tfds_images.open_sources(config.dataset, config.data_dir,
                                     config.splits, high_res, mock_examples)

  def read(split, process_index=0, process_count=1):
    source = sources[split]
    name = re.sub(r'[^\w.-]+', '_', f'{config.dataset}'
                  f'{f".mock{mock_examples}" if mock_examples else ""}'
                  f'.{source.split}.{high_res}from{low_res}')
    cache = os.path.join(workdir, 'data', f'{name}.{process_index}-of-'
                         f'{process_count}.npz')
    return tfds_images.preprocessed(source, high_res, low_res, process_index,
                                    process_count, cache)

  readers = {split: (lambda split=split: read(split)) for split in sources}
  return ImageTask(image_shape, low_res_shape, readers,
                   lambda index, count: read('train', index, count))
