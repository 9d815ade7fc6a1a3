"""Super-resolution tasks: low-resolution inputs, high-resolution targets.

An ImageTask serves what every task serves to training and decoding (the
`spec.Task` protocol: vocab, encoded pairs, this process's training share,
sources to decode), with images instead of sentences: a source is
to_tokens(low-res input) and a target the vocabulary's encoding of the
high-res target (its intensities, or its residuals from the input's
bicubic upsampling: tokens.TARGET_FORMS), both WITHOUT eos (an image has
a fixed length: decoding runs exactly H*W*C tokens). The image task
modules (embedded_photos, tfds_images) load one from a task section whose
fields, besides their own, are:
  name: 'embedded_images' or 'tfds_images'.
  high_res: side of the targets (e.g. 32).
  low_res: side of the inputs (e.g. 8); high_res must be a multiple of it.
  max_source_len, max_target_len: low_res**2 * 3 and high_res**2 * 3.
  targets: 'intensities' or 'residuals' (`vocabulary`).
  reference: what residuals are taken from: 'bicubic', or 'linear', a
    linear filter fitted on the training images (images/fitted_filter.py,
    kept in the run's workdir).
  reference_window: the fitted filter's input neighbourhood, odd.
  reference_path: another run's fitted filter to read (that of the run a
    warm start starts from); '': the workdir's, fitted by the training job.
The last four are optional, their defaults `DEFAULTS`. `check` below checks
them, and the fields of the super-resolution report
(bpd_jax/evaluation/image.py) in the eval section.
"""

import collections.abc
import dataclasses
from typing import Callable

import numpy as np

from bpd_jax.infra import extras
from bpd_jax.infra import numeric
from bpd_jax.tasks import host_shards
from bpd_jax.tasks.checks import at_least
from bpd_jax.tasks.images import fitted_filter
from bpd_jax.tasks.images import tokens as images_lib

ImagePair = tuple[np.ndarray, np.ndarray]  # (low uint8 [N,h,w,C], high ...).
# The optional fields of an image task's section (spec.TaskSpec.defaults):
# intensity targets, and residuals, when asked for, from bicubic
# upsampling (a fitted filter, when asked for, reads 5x5 input pixels).
DEFAULTS = dict(targets='intensities', reference='bicubic',
                reference_window=5, reference_path='')


class ImagePairs(collections.abc.Sequence):
  """(source ids, target ids) of images, tokenized on access.

  Holding uint8 images rather than int32 ids keeps a split at a quarter of
  the memory (CelebA's 162k training targets: 0.5 GB, not 2 GB).
  """

  def __init__(self, low: np.ndarray, high: np.ndarray,
               vocab: images_lib.ImageVocabulary):
    if len(low) != len(high):
      raise ValueError(f'{len(low)} inputs but {len(high)} targets.')
    self.low, self.high, self.vocab = low, high, vocab

  def __len__(self) -> int:
    return len(self.low)

  def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
    """(int32 [h*w*C] source ids, int32 [H*W*C] target ids)."""
    low = self.low[index]
    return (images_lib.to_tokens(low),
            self.vocab.encode(low, self.high[index]))

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
    vocab: pad / eos / bos and the values of the target form.
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
    return ImagePairs(*self.images(split), self.vocab)

  def train_examples(self, process_index: int = 0,
                     process_count: int = 1) -> ImagePairs:
    """This process's share of the encoded training pairs."""
    if self.train_shard is not None:
      return ImagePairs(*self.train_shard(process_index, process_count),
                        self.vocab)
    low, high = self.images('train')
    start, end = host_shards.shard_bounds(len(low), process_index,
                                          process_count)
    return ImagePairs(low[start:end], high[start:end], self.vocab)

  def train_source_len(self, max_source_len: int) -> int:
    """Training sources are the whole input image: max_source_len."""
    return max_source_len

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


def shapes(task) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
  """(target (H, W, C), input (h, w, C)) of a task section, checked.

  Raises:
    ValueError: a bad high_res or low_res.
  """
  at_least(task, 'task', high_res=1, low_res=1)
  if task.high_res % task.low_res:
    raise ValueError(f'task.high_res={task.high_res} must be a multiple of '
                     f'task.low_res={task.low_res} (inputs are area means of '
                     f'whole blocks of the target).')
  return (task.high_res, task.high_res, 3), (task.low_res, task.low_res, 3)


REFERENCES = ('bicubic', 'linear')  # task.reference's values.


def vocabulary(task, reference: fitted_filter.FittedFilter | None = None
               ) -> images_lib.ImageVocabulary:
  """The vocabulary of a task section's `targets` form, residuals taken
  from `reference` (None: bicubic).

  Raises:
    ValueError: an unknown form, or a bad reference field.
  """
  targets, kind = task.targets, task.reference
  if kind not in REFERENCES:
    raise ValueError(f'task.reference={kind!r} is not one of {REFERENCES}.')
  if kind != 'bicubic' and targets != 'residuals':
    raise ValueError(f'task.reference={kind!r} is what residuals are taken '
                     f'from: it needs task.targets=\'residuals\', not '
                     f'{targets!r}.')
  window = task.reference_window
  if not (numeric.is_integer(window) and window >= 1 and window % 2):
    raise ValueError(f'task.reference_window={window!r} must be a positive '
                     f'odd integer.')
  return images_lib.ImageVocabulary(targets, reference)


def run_vocabulary(task, workdir: str, train: bool,
                   training_images: Callable[[], ImagePair]
                   ) -> images_lib.ImageVocabulary:
  """A run's vocabulary: `vocabulary`, with the run's fitted filter when
  task.reference is 'linear' (found in the workdir, or fitted on
  `training_images()` and saved there when `train`:
  fitted_filter.reference_filter, which checks the file it reads against
  the task's window, channels and scale)."""
  checked = vocabulary(task)  # Its fields, before any fitting.
  if task.reference == 'bicubic':
    return checked
  (high_res, _, channels), (low_res, _, _) = shapes(task)
  fitted = fitted_filter.reference_filter(
      workdir, task.reference_window, training_images, train,
      task.reference_path, channels=channels, scale=high_res // low_res)
  return images_lib.ImageVocabulary(checked.targets, fitted)


def check_lengths_and_eval(config) -> None:
  """The max lengths of the task section (an image's intensities, training
  pads to them), and the super-resolution report's fields
  (bpd_jax/evaluation/image.py), whose packages are an extra's."""
  extras.require()  # Before any work: the photos, Pillow, the report.
  ev, task = config.eval, config.task
  vocabulary(task)
  for field, side in (('max_source_len', task.low_res),
                      ('max_target_len', task.high_res)):
    if task[field] != side * side * 3:
      raise ValueError(f'task.{field}={task[field]} must be {side * side * 3}'
                       f' ({side}x{side}x3 intensities, no eos).')
  at_least(ev, 'eval', grid_examples=1)
  pixels = task.high_res * task.high_res * 3
  if ev.max_len != pixels:
    raise ValueError(f'eval.max_len={ev.max_len} must be {pixels}: a '
                     f'{task.high_res}x{task.high_res}x3 image\'s '
                     f'intensities.')
