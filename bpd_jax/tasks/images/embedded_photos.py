"""Real photos for super-resolution that need no download.

The natural colour photos shipped inside scikit-image's wheel
(skimage.data) and matplotlib's (grace_hopper.jpg), cut into seeded square
crops at several scales: a crop at scale f is a high_res x high_res window
of the photo area-downsampled by f (an f*high_res square of the photo), so
one photo yields fine texture (f = 1) and whole objects (f = 8). The input
is the crop downsampled by area to low_res (tokens.super_resolution_pair).

Splits are disjoint by photo (PHOTOS): no validation or test crop shares a
pixel with a training crop. The two portraits are held out, so that
evaluation is on faces, as CelebA's is, that training never saw.

Each photo is downsampled once per scale; a crop is then a slice on that
scale's grid (its offsets in the photo are multiples of f). A pixel of the
downsampled photo is the rounded mean of an f x f block, so the slice equals
downsampling the photo's crop itself: one rounding, no pyramid error.
Tens of thousands of crops take well under a second.

The 'embedded_images' task's section, besides the image fields of
images/task.py:
  sizes: {split: number of crops}, splits of 'train', 'validation', 'test'
    (each split its own photos); 'train' is needed.
  scales: optional, the photos' downsampling factors crops are cut at.
  seed: optional, the crops' seed.
The optional fields' defaults are `DEFAULTS`.
"""

import functools
import os

import numpy as np

from bpd_jax.infra import extras
from bpd_jax.infra import numeric
from bpd_jax.tasks import spec
from bpd_jax.tasks.images import task as task_lib
from bpd_jax.tasks.images import tokens as images_lib

SPLITS = ('train', 'validation', 'test')
# Photo name -> (package, file). Natural colour photos only: no drawings,
# charts, grey images, or the right half of the stereo pair (the same scene
# as motorcycle_left, which would leak across splits).
_FILES = {
    'chelsea': ('skimage', 'chelsea.png'),  # A cat, 300x451.
    'coffee': ('skimage', 'coffee.png'),  # A cup of coffee, 400x600.
    'hubble_deep_field': ('skimage', 'hubble_deep_field.jpg'),  # 872x1000.
    'immunohistochemistry': ('skimage', 'ihc.png'),  # Stained tissue, 512².
    'motorcycle_left': ('skimage', 'motorcycle_left.png'),  # 500x741.
    'retina': ('skimage', 'retina.jpg'),  # A fundus photo, 1411x1411.
    'rocket': ('skimage', 'rocket.jpg'),  # A launch, 427x640.
    'astronaut': ('skimage', 'astronaut.png'),  # Eileen Collins, 512x512.
    'grace_hopper': ('matplotlib', 'grace_hopper.jpg'),  # 600x512.
}
PHOTOS = {
    'train': ('chelsea', 'coffee', 'hubble_deep_field', 'immunohistochemistry',
              'motorcycle_left', 'retina', 'rocket'),
    'validation': ('astronaut',),
    'test': ('grace_hopper',),
}
# The optional fields of the section (spec.TaskSpec.defaults): fine
# texture to whole objects; the image fields' own (images/task.py).
DEFAULTS = dict(task_lib.DEFAULTS, scales=(1, 2, 4, 8), seed=0)


def _path(package: str, name: str) -> str:
  if package == 'skimage':
    return os.path.join(extras.load('skimage.data').data_dir, name)
  return str(extras.load('matplotlib.cbook').get_sample_data(
      name, asfileobj=False))


@functools.lru_cache(maxsize=None)
def photo(name: str) -> np.ndarray:
  """uint8 [H, W, 3]: one of the photos, read from its installed package."""
  if name not in _FILES:
    raise ValueError(f'photo {name!r} is not one of {sorted(_FILES)}.')
  package, _ = _FILES[name]
  path = _path(*_FILES[name])
  if not os.path.exists(path):
    raise FileNotFoundError(f'photo {name!r} not found at {path}: it ships '
                            f'with {package} (scikit-image >= 0.22, '
                            f'matplotlib >= 3.8); reinstall it.')
  with extras.load('PIL.Image').open(path) as image:
    return np.asarray(image.convert('RGB'))


@functools.lru_cache(maxsize=None)
def _scaled(name: str, scale: int) -> np.ndarray:
  """uint8 [H // scale, W // scale, 3]: the photo downsampled by `scale`."""
  image = photo(name)
  height, width = (n // scale * scale for n in image.shape[:2])
  cropped = image[:height, :width]
  blocks = cropped.reshape(height // scale, scale, width // scale, scale, 3)
  return np.rint(blocks.sum(axis=(1, 3), dtype=np.int64) /
                 scale**2).astype(np.uint8)


@functools.lru_cache(maxsize=8)
def crops(split: str, count: int, high_res: int, low_res: int,
          scales: tuple[int, ...] = DEFAULTS['scales'],
          seed: int = DEFAULTS['seed']) -> tuple[np.ndarray, np.ndarray]:
  """`count` seeded crops of the split's photos, as super-resolution pairs.

  Each crop draws a (photo, scale) pair uniformly among the pairs where the
  scaled photo holds a high_res square, then a uniform position. The arrays
  are cached (and shared: do not write to them).

  Args:
    split: 'train', 'validation' or 'test'.
    count: number of crops.
    high_res: side of the targets.
    low_res: side of the inputs; high_res must be a multiple of it.
    scales: integer downsampling factors of the photos to crop from.
    seed: with the split, determines the crops.

  Returns:
    (low uint8 [count, low_res, low_res, 3], high uint8 [count, high_res,
    high_res, 3]).
  """
  if split not in PHOTOS:
    raise ValueError(f'split {split!r} is not one of {SPLITS}.')
  if count < 1 or high_res < 1 or low_res < 1 or not scales or any(
      not isinstance(s, int) or s < 1 for s in scales):
    raise ValueError(f'count={count}, high_res={high_res}, low_res={low_res} '
                     f'must be >= 1 and scales={scales} positive integers.')
  choices = [(name, scale) for name in PHOTOS[split] for scale in scales
             if min(_scaled(name, scale).shape[:2]) >= high_res]
  if not choices:
    raise ValueError(f'no {split} photo at scales {scales} holds a '
                     f'{high_res}x{high_res} crop.')
  rng = np.random.default_rng([seed, SPLITS.index(split)])
  picks = rng.integers(len(choices), size=count)
  high = np.empty((count, high_res, high_res, 3), np.uint8)
  for choice, (name, scale) in enumerate(choices):
    rows = np.flatnonzero(picks == choice)
    scaled = _scaled(name, scale)
    tops = rng.integers(scaled.shape[0] - high_res + 1, size=len(rows))
    lefts = rng.integers(scaled.shape[1] - high_res + 1, size=len(rows))
    for row, top, left in zip(rows, tops, lefts):
      high[row] = scaled[top:top + high_res, left:left + high_res]
  low, high = images_lib.super_resolution_pair(high, high_res, low_res)
  low.flags.writeable = high.flags.writeable = False
  return low, high


def _check_section(task) -> None:
  task_lib.shapes(task)
  sizes = dict(task.sizes)
  if 'train' not in sizes:
    raise ValueError(f'task.sizes={sizes} must have a "train" entry.')
  unknown = set(sizes) - set(SPLITS)
  if unknown:
    raise ValueError(f'task.sizes has splits {sorted(unknown)}: only splits '
                     f'of {SPLITS} (the photos are split, not the crops).')
  for split, count in sizes.items():
    if not numeric.is_integer(count) or count < 1:
      raise ValueError(f'task.sizes[{split!r}]={count!r} must be an '
                       f'integer >= 1.')
  scales = tuple(task.scales)
  if not scales or not all(numeric.is_integer(s) and s >= 1 for s in scales):
    raise ValueError(f'task.scales={scales!r} must be integers >= 1.')


def _check(config) -> None:
  _check_section(config.task)
  task_lib.check_lengths_and_eval(config)


def _load(config, workdir: str,
          train_vocab: bool = True) -> task_lib.ImageTask:
  """Crops cut on first use of a split; a fitted reference filter
  (task.reference 'linear') found in the workdir, or fitted on the
  training crops and saved there when `train_vocab`."""
  _check_section(config)
  high_res, low_res = config.high_res, config.low_res
  scales, seed = tuple(config.scales), config.seed
  readers = {split: (lambda split=split, count=count: crops(
      split, count, high_res, low_res, scales, seed))
             for split, count in config.sizes.items()}
  task = task_lib.ImageTask(*task_lib.shapes(config), readers)
  task.vocab = task_lib.run_vocabulary(config, workdir, train_vocab,
                                       lambda: task.images('train'))
  return task


SPEC = spec.TaskSpec(name='embedded_images', kind='image', load=_load,
                     check=_check, defaults=DEFAULTS)
