"""Images as token sequences, and the preprocessing of super-resolution data.

An image [H, W, C] of uint8 intensities is the sequence of its H*W*C channel
intensities in raster order (row, then column, then channel: the Image
Transformer's order), each intensity v written as id v + INTENSITY_OFFSET.
Ids 0, 1, 2 stay pad, eos and bos (infra/token_ids.py), so the
training loop, batching and losses work on images unchanged, and the
distance between two intensity ids is the distance between the intensities
(what the distance verification criterion |a - b| <= eps relies on).

Targets take one of two forms (TARGET_FORMS, the task's `targets`):
- 'intensities': intensity v is id v + INTENSITY_OFFSET, as above.
- 'residuals': the target's intensity minus a reference upsampling of the
  input at the same place, r in [-255, 255], written as id r +
  RESIDUAL_ZERO_ID. The reference is bicubic (`bicubic`, the baseline a
  super-resolution model has to beat), or a linear filter fitted to the
  training images (images/fitted_filter.py). A model that predicts
  residual 0 everywhere returns the reference's image; one whose output
  distribution starts centred there (models/mixture.py) starts from it and
  learns the detail it lacks. Ids stay ordered (the distance between two
  residual ids is the distance between the intensities they give at one
  place).
Sources are always intensities.

Downsampling is by area: an output pixel is the mean of the input area it
covers, weighted by overlap when the factor is not an integer (CelebA's
178 -> 32), rounded to the nearest integer (ties to even). For an integer
factor it is the exact mean of each f x f block. We compute it ourselves (a
weighted sum over a band of rows, then of columns) rather than with Pillow
or scikit-image, for these reasons: Pillow's Image.BOX works in
fixed-point arithmetic and differs by 1 from the exact block mean in many
values; skimage.transform.resize_local_mean is exact but more than ten
times slower than ours for 178 -> 32 (a core's quarter of an hour for
CelebA's images). The tests check that ours equals resize_local_mean,
rounded.
"""

import dataclasses

import numpy as np

from bpd_jax.infra import extras
from bpd_jax.infra import token_ids

INTENSITY_OFFSET = 3  # Id of intensity v: v + 3 (after pad, eos, bos).
NUM_INTENSITIES = 256
VOCAB_SIZE = INTENSITY_OFFSET + NUM_INTENSITIES  # 259.
# Id of residual r in [-255, 255]: r + 258; the ids run 3 .. 513.
RESIDUAL_ZERO_ID = INTENSITY_OFFSET + NUM_INTENSITIES - 1
TARGET_FORMS = {'intensities': VOCAB_SIZE,  # Form -> vocabulary size.
                'residuals': INTENSITY_OFFSET + 2 * NUM_INTENSITIES - 1}
_CHUNK = 256  # Images downsampled at a time: ~70 MB of scratch for 178².


@dataclasses.dataclass(frozen=True)
class ImageVocabulary:
  """The ids of image tokens: pad 0, eos 1, bos 2, then the values of the
  target form (intensity v -> v + 3, or residual r -> r + 258).

  Not a text vocabulary (there is no text to encode); it gives what a model
  config and the training loop read (vocab_size and the special ids), and
  turns images into target ids and back (`encode`, `decode`).

  Attributes:
    targets: the form, a key of TARGET_FORMS.
    reference: what residuals are taken from: a callable uint8 [..., h, w,
      C] -> [..., H, W, C] with a `fingerprint` (a
      fitted_filter.FittedFilter); None: bicubic.
  """
  targets: str = 'intensities'
  reference: object = None
  pad_id, eos_id, bos_id = token_ids.PAD_ID, token_ids.EOS_ID, token_ids.BOS_ID
  stop_ids = ()
  intensity_offset = INTENSITY_OFFSET  # The lowest value's id, either form.

  def __post_init__(self):
    if self.targets not in TARGET_FORMS:
      raise ValueError(f'task.targets={self.targets!r} is not one of '
                       f'{tuple(TARGET_FORMS)}.')
    if self.reference is not None and self.targets != 'residuals':
      raise ValueError(f'a reference upsampling is what residuals are taken '
                       f'from; task.targets={self.targets!r} has none.')

  @property
  def vocab_size(self) -> int:
    return TARGET_FORMS[self.targets]

  @property
  def fingerprint(self) -> str:
    """Fixed ids (see text.vocab.Vocabulary.fingerprint): one value a
    form, and the fitted reference's hash (the targets' meaning) if any."""
    own = f'{self.targets}-{self.vocab_size}'
    return f'{own}-{self.reference.fingerprint}' if self.reference else own

  def upsampled(self, low: np.ndarray, size: int) -> np.ndarray:
    """The reference image of residuals: uint8 [..., h, w, C] ->
    [..., size, size, C]."""
    if self.reference is None:
      return bicubic(low, size)
    upsampled = self.reference(low)
    if upsampled.shape[-2] != size:
      raise ValueError(f'the reference filter makes {upsampled.shape[-2]}-'
                       f'pixel images of these inputs; the targets have '
                       f'{size}.')
    return upsampled

  def encode(self, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Target ids of uint8 [..., H, W, C] images whose inputs are uint8
    [..., h, w, C] `low`: int32 [..., H*W*C]."""
    if self.targets == 'intensities':
      return to_tokens(high)
    reference = self.upsampled(low, high.shape[-2])
    return (to_tokens(high) - to_tokens(reference)) + RESIDUAL_ZERO_ID

  def decode(self, tokens: np.ndarray, low: np.ndarray,
             shape: tuple[int, int, int]) -> np.ndarray:
    """uint8 [..., H, W, C] images of target ids int [..., H*W*C] whose
    inputs are `low` (`from_tokens`'s errors; residuals are added to the
    reference and clipped to [0, 255], a special id is black as there)."""
    if self.targets == 'intensities':
      return from_tokens(tokens, shape)
    tokens = np.asarray(tokens)
    _check_ids(tokens, shape, self.vocab_size)
    reference = to_tokens(self.upsampled(low, shape[0])) - INTENSITY_OFFSET
    values = reference + tokens - RESIDUAL_ZERO_ID
    values = np.where(tokens < INTENSITY_OFFSET, 0, np.clip(values, 0, 255))
    return values.astype(np.uint8).reshape(*tokens.shape[:-1], *shape)


def bicubic(low: np.ndarray, size: int) -> np.ndarray:
  """Bicubic upsampling uint8 [..., h, w, C] -> [..., size, size, C]
  (Pillow's): the reference of residual targets and the baseline of the
  super-resolution report."""
  image_lib = extras.load('PIL.Image')  # The images extra.
  low = np.asarray(low)
  flat = low.reshape(-1, *low.shape[-3:])
  up = np.stack([np.asarray(image_lib.fromarray(image).resize(
      (size, size), image_lib.Resampling.BICUBIC)) for image in flat])
  return up.reshape(*low.shape[:-3], size, size, low.shape[-1])


def to_tokens(images: np.ndarray) -> np.ndarray:
  """uint8 [..., H, W, C] -> int32 [..., H*W*C] ids, in raster order."""
  images = np.asarray(images)
  if images.dtype != np.uint8 or images.ndim < 3:
    raise ValueError(f'images must be uint8 [..., H, W, C]; got '
                     f'{images.dtype} {images.shape}.')
  flat = images.reshape(*images.shape[:-3], -1)
  return flat.astype(np.int32) + INTENSITY_OFFSET


def count_special(tokens: np.ndarray) -> np.ndarray:
  """int [..., L] ids -> int64 [...]: how many are pad / eos / bos."""
  return (np.asarray(tokens) < INTENSITY_OFFSET).sum(axis=-1)


def from_tokens(tokens: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
  """int [..., H*W*C] ids -> uint8 [..., H, W, C] images.

  A special id (pad, eos or bos: a model may emit eos before the image is
  complete) becomes intensity 0, a black value; count_special(tokens) says
  how many there were, for a report to show rather than hide them.

  Raises:
    ValueError: the length is not H*W*C, or an id is outside [0, VOCAB_SIZE)
      (no model over this vocabulary emits one: a bug upstream).
  """
  tokens = np.asarray(tokens)
  _check_ids(tokens, shape, VOCAB_SIZE)
  intensities = np.maximum(tokens - INTENSITY_OFFSET, 0).astype(np.uint8)
  return intensities.reshape(*tokens.shape[:-1], *shape)


def _check_ids(tokens: np.ndarray, shape: tuple[int, int, int],
               vocab_size: int) -> None:
  """Raises ValueError unless tokens [..., L] are images of `shape` in a
  vocabulary of vocab_size ids."""
  length = int(np.prod(shape))
  if tokens.ndim < 1 or tokens.shape[-1] != length:
    raise ValueError(f'tokens of shape {tokens.shape} have '
                     f'{tokens.shape[-1] if tokens.ndim else 0} ids a row; an '
                     f'image of shape {tuple(shape)} has {length}.')
  if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
    raise ValueError(f'token ids must be in [0, {vocab_size}); got '
                     f'[{tokens.min()}, {tokens.max()}].')


def center_crop(image: np.ndarray) -> np.ndarray:
  """[..., H, W, C] -> [..., S, S, C], S = min(H, W), the central square.

  An odd margin leaves the extra row (column) at the bottom (right).
  """
  height, width = image.shape[-3:-1]
  side = min(height, width)
  top, left = (height - side) // 2, (width - side) // 2
  return image[..., top:top + side, left:left + side, :]


def area_weights(in_size: int, out_size: int) -> np.ndarray:
  """float64 [out_size, in_size]: input pixel i's share of output pixel o.

  Output pixel o covers input interval [o * s, (o + 1) * s), s =
  in_size / out_size; the weight is the overlap of [i, i + 1) with it,
  divided by s, so each row sums to 1.
  """
  scale = in_size / out_size
  starts = np.arange(out_size)[:, None] * scale
  pixels = np.arange(in_size)[None, :]
  overlap = (np.minimum(pixels + 1, starts + scale) -
             np.maximum(pixels, starts))
  return np.clip(overlap, 0, None) / scale


def downsample(images: np.ndarray, size: int) -> np.ndarray:
  """uint8 [..., H, W, C] -> uint8 [..., size, size, C], by area.

  Raises:
    ValueError: size is not in [1, min(H, W)] (this only shrinks).
  """
  images = np.asarray(images)
  if images.dtype != np.uint8 or images.ndim < 3:
    raise ValueError(f'images must be uint8 [..., H, W, C]; got '
                     f'{images.dtype} {images.shape}.')
  *batch, height, width, channels = images.shape
  if not 1 <= size <= min(height, width):
    raise ValueError(f'cannot downsample {height}x{width} images to '
                     f'{size}x{size}: size must be in [1, {min(height, width)}]'
                     f'.')
  if height == width == size:
    return images.copy()
  if height % size == 0 and width % size == 0:
    # Exact integer sums: no float rounding can tip a tie at .5.
    fy, fx = height // size, width // size
    blocks = images.reshape(*batch, size, fy, size, fx, channels)
    sums = blocks.sum(axis=(-4, -2), dtype=np.int64)
    return np.rint(sums / (fy * fx)).astype(np.uint8)
  (row_index, row_weight), (col_index, col_weight) = (
      _band(height, size), _band(width, size))
  flat = images.reshape(-1, height, width, channels)
  out = np.empty((len(flat), size, size, channels), np.uint8)
  for start in range(0, len(flat), _CHUNK):
    # [n, size, band, W, C] rows gathered, weighted, summed; then columns.
    rows = np.einsum('nobwc,ob->nowc', flat[start:start + _CHUNK, row_index],
                     row_weight)
    means = np.einsum('nopbc,pb->nopc', rows[:, :, col_index], col_weight)
    out[start:start + _CHUNK] = np.rint(np.clip(means, 0, 255))
  return out.reshape(*batch, size, size, channels)


def _band(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray]:
  """area_weights as (int [out, band] input indices, float64 [out, band]
  weights): an output pixel covers about in/out + 1 input pixels, so the
  banded sum costs a few operations an input value, where the dense
  product costs out_size.
  """
  dense = area_weights(in_size, out_size)
  nonzero = dense > 0
  index = nonzero.argmax(axis=1)[:, None] + np.arange(nonzero.sum(1).max())
  inside = index < in_size  # Past the last pixel: clamped, weight 0.
  index = np.minimum(index, in_size - 1)
  return index, np.where(inside, np.take_along_axis(dense, index, 1), 0.0)


def super_resolution_pair(images: np.ndarray, high_res: int,
                          low_res: int) -> tuple[np.ndarray, np.ndarray]:
  """Square uint8 [N, S, S, C] -> (low [N, low_res, low_res, C], high [N,
  high_res, high_res, C]).

  The low-resolution input is the area downsampling of the high-resolution
  target (high_res a multiple of low_res: exact block means), so it is a
  known function of the target.
  """
  if high_res % low_res:
    raise ValueError(f'high_res={high_res} must be a multiple of '
                     f'low_res={low_res}.')
  high = downsample(images, high_res)
  return downsample(high, low_res), high
