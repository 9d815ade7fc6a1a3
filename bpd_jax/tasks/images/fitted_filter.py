"""A linear upsampling filter fitted to the training images: a reference
for residual targets that starts where bicubic leaves off.

Residual targets (tokens.py) are each output intensity minus a reference
image computed from the input; a model whose output starts centred on
residual 0 starts from that reference. Bicubic is the usual one; this is
the least-squares one: for each output channel and sub-pixel phase (the
output pixel's place inside the input pixel under it, scale x scale of
them) a linear map from the window x window input pixels around that
input pixel (every channel, edges repeated), the bicubic value and a
constant to the output intensity, fitted on the training pairs. Bicubic
is one of its candidates (weight 1 on the bicubic value, 0 elsewhere), so
on the images it was fitted to its squared error (before rounding) is
never above bicubic's; on other images what it gains is measured, not
guaranteed (docs/results/images.md).

The normal equations are accumulated a chunk of images at a time (a
[P, P] matrix, P = window^2 C + 2), so fitting on tens of thousands of
images needs megabytes, not the gigabytes of the stacked regressors.

`reference_filter` finds a run's filter in its workdir, or fits and saves
it there (as a text vocabulary is trained once and kept with the run): a
resumed run and a later evaluation read the same weights, and a run that
starts from another's model reads that run's (task.reference_path).
"""

import dataclasses
import hashlib
import logging
import os
import zipfile
import zlib

import numpy as np

from bpd_jax.infra import atomic_files
from bpd_jax.tasks.images import tokens

FILE_NAME = 'reference_filter.npz'  # In the run's workdir.
_CHUNK_VALUES = 2 ** 24  # float64 regressors stacked at a time: 128 MB.


@dataclasses.dataclass(frozen=True, eq=False)
class FittedFilter:
  """Linear maps from an input neighbourhood to an output intensity.

  Attributes:
    window: odd side of the input neighbourhood read.
    weights: float64 [C, scale, scale, window^2 C + 2], a map per output
      channel and sub-pixel phase over (the window's intensities in
      (row, column, channel) order, the bicubic value, 1).
  """
  window: int
  weights: np.ndarray

  @property
  def scale(self) -> int:
    """Upsampling factor: output pixels an input pixel covers, a side."""
    return self.weights.shape[1]

  @property
  def fingerprint(self) -> str:
    """A short hash of the weights: a run's vocabulary names its filter."""
    digest = hashlib.sha256(np.ascontiguousarray(self.weights).tobytes())
    return f'linear{self.window}-{digest.hexdigest()[:12]}'

  @classmethod
  def fit(cls, low: np.ndarray, high: np.ndarray,
          window: int) -> 'FittedFilter':
    """The least-squares filter from uint8 inputs [N, h, w, C] to uint8
    targets [N, h*f, w*f, C].

    Raises:
      ValueError: window is not a positive odd integer, the shapes do not
        pair, or there are no images.
    """
    low, high = np.asarray(low), np.asarray(high)
    if not (isinstance(window, int) and window >= 1 and window % 2):
      raise ValueError(f'window={window!r} must be a positive odd integer.')
    scale = _scale(low, high)
    if not len(low):
      raise ValueError('no images to fit a filter on.')
    channels = low.shape[-1]
    size = window * window * channels + 2
    gram = np.zeros((channels, scale, scale, size, size))
    moment = np.zeros((channels, scale, scale, size))
    step = _chunk(low, window)
    for start in range(0, len(low), step):
      around, extra = _regressors(low[start:start + step], window, scale)
      y = _by_phase(high[start:start + step], scale)  # [C, f, f, m]
      # The window's block of the Gram matrix is the same for every map:
      # one product, not one a channel and phase.
      gram[..., :-2, :-2] += around.T @ around
      cross = np.einsum('mq,cabmr->cabqr', around, extra, optimize=True)
      gram[..., :-2, -2:] += cross
      gram[..., -2:, :-2] += cross.swapaxes(-1, -2)
      gram[..., -2:, -2:] += extra.swapaxes(-1, -2) @ extra
      moment[..., :-2] += np.einsum('mq,cabm->cabq', around, y, optimize=True)
      moment[..., -2:] += (extra.swapaxes(-1, -2) @ y[..., None])[..., 0]
    # lstsq, not solve: a flat training set leaves the Gram matrix singular.
    weights = np.stack([
        np.linalg.lstsq(gram[index], moment[index], rcond=None)[0]
        for index in np.ndindex(gram.shape[:3])]).reshape(moment.shape)
    return cls(window, weights)

  def __call__(self, low: np.ndarray) -> np.ndarray:
    """uint8 [..., h, w, C] inputs -> uint8 [..., h*f, w*f, C], rounded
    and clipped to [0, 255]."""
    low = np.asarray(low)
    if low.dtype != np.uint8 or low.ndim < 3:
      raise ValueError(f'images must be uint8 [..., h, w, C]; got '
                       f'{low.dtype} {low.shape}.')
    channels = self.weights.shape[0]
    if low.shape[-1] != channels:
      raise ValueError(f'the filter was fitted on {channels}-channel images; '
                       f'got {low.shape[-1]} channels.')
    flat = low.reshape(-1, *low.shape[-3:])
    n, h, w, _ = flat.shape
    f, step = self.scale, _chunk(flat, self.window)
    parts = []
    for start in range(0, n, step):
      around, extra = _regressors(flat[start:start + step], self.window, f)
      parts.append(np.einsum('mq,cabq->cabm', around, self.weights[..., :-2],
                             optimize=True)
                   + (extra @ self.weights[..., -2:, None])[..., 0])
    out = np.concatenate(parts, axis=-1)  # [C, f, f, n h w]
    out = out.reshape(channels, f, f, n, h, w).transpose(3, 4, 1, 5, 2, 0)
    out = np.clip(np.rint(out), 0, 255).astype(np.uint8)
    return out.reshape(*low.shape[:-3], h * f, w * f, channels)

  def save(self, path: str) -> None:
    """Writes the filter to `path` (.npz), whole or not at all."""
    with atomic_files.replacing(path) as temp:
      np.savez(temp, window=self.window, weights=self.weights)

  @classmethod
  def load(cls, path: str) -> 'FittedFilter':
    """The filter `save` wrote to `path`, checked whole: nothing pickled
    is ever loaded, and weights that are not finite are refused here, not
    met as NaN residuals in training.

    Raises:
      ValueError: one line naming `path`: it is not an .npz archive of
        `window` and `weights`, the window is not a positive odd integer,
        or the weights are not a finite float [C, f, f, window^2 C + 2]
        array.
    """
    window, weights = _read(path)
    if not (window.shape == () and window.dtype.kind in 'iu'
            and window >= 1 and window % 2):
      raise ValueError(f'{path} holds window={window!r}: not a positive odd '
                       f'integer.')
    window = int(window)
    if (weights.dtype.kind != 'f' or weights.ndim != 4
        or weights.shape[1] != weights.shape[2] or not all(weights.shape)
        or weights.shape[3] != window * window * weights.shape[0] + 2):
      raise ValueError(
          f'{path} holds {weights.dtype} weights of shape {weights.shape}: '
          f'a {window}x{window} filter\'s are float [C, f, f, '
          f'{window * window}C + 2].')
    bad = weights.size - np.count_nonzero(np.isfinite(weights))
    if bad:
      raise ValueError(f'{path} holds {bad} NaN or infinite weights of '
                       f'{weights.size}.')
    return cls(window, weights)


def reference_filter(workdir: str, window: int, fit_on, train: bool,
                     path: str = '', *, channels: int,
                     scale: int) -> FittedFilter:
  """A run's filter: WORKDIR/reference_filter.npz, or fitted and saved
  there when missing and `train`; or the file `path` names (another run's,
  e.g. the base a heads run starts from), never fitted. The file read is
  checked before any training (`FittedFilter.load`; its window, channels
  and scale the task's), so a damaged one stops the job in one line.

  With several processes, process 0 fits it and the others wait for it
  (the workdir must be shared, as it is for checkpoints).

  Args:
    workdir: the run's directory.
    window: the neighbourhood's side; a saved filter of another window is
      an error (the run was started with another config).
    fit_on: () -> (low, high) uint8 training images, called only to fit.
    train: fit a missing filter (the training job); False: a missing one is
      an error (evaluation, the other jobs).
    path: task.reference_path, '' for the workdir's.
    channels: the task's image channels, C.
    scale: the task's upsampling factor, high_res / low_res.

  Raises:
    FileNotFoundError: the filter is missing and not to be fitted.
    ValueError: one line naming the file: it is damaged (`load`), or
      fitted for another window, channel count or scale; and the fix.
  """
  own = os.path.join(workdir, FILE_NAME)
  if path and not os.path.exists(path):
    raise FileNotFoundError(
        f'task.reference_path={path} not found: it names the {FILE_NAME} '
        f'of a run trained with task.reference=\'linear\'.')
  if not path and not os.path.exists(own) and not train:
    raise FileNotFoundError(
        f'reference filter {own} not found: the training job fits and '
        f'writes it (python -m bpd_jax.main --workdir=...); a run trained '
        f'with residuals from bicubic reads task.reference=\'bicubic\'.')
  fix = (f'task.reference_path names the {FILE_NAME} of a run trained with '
         f'task.reference=\'linear\' on images like these.' if path else
         'Delete it and the training job fits it again.')
  path = path or own
  # Only here: the data modules need no devices otherwise.
  from bpd_jax.infra import distributed

  def fit():
    low, high = fit_on()
    logging.info('Fitting a %dx%d linear reference filter on %d training '
                 'images -> %s', window, window, len(low), path)
    FittedFilter.fit(low, high, window).save(path)

  distributed.made_once(path, fit, train, 'reference filter')
  try:
    found = FittedFilter.load(path)
  except ValueError as error:
    raise ValueError(f'{error} {fix}') from None
  if found.window != window:
    raise ValueError(f'{path} is a {found.window}x{found.window} filter; the '
                     f'config asks for task.reference_window={window}. Use '
                     f'the config the run was started with, or a new workdir.')
  fitted_for = (found.weights.shape[0], found.scale)
  if fitted_for != (channels, scale):
    raise ValueError(
        f'{path} was fitted on {fitted_for[0]}-channel images upsampled '
        f'{fitted_for[1]}x; the task\'s are {channels}-channel, upsampled '
        f'{scale}x (task.high_res / task.low_res). {fix}')
  return found


def _read(path: str) -> tuple[np.ndarray, np.ndarray]:
  """(window, weights) of an .npz file `save` wrote, read without
  unpickling anything.

  Raises:
    ValueError: one line naming `path`: it cannot be read, is not an .npz
      archive, or lacks either array.
  """
  where = f'{path} is not a saved reference filter'
  try:
    saved = np.load(path, allow_pickle=False)
  except ValueError:  # numpy's guess: bytes that are neither .npz nor .npy.
    raise ValueError(f'{where}: it is no .npz archive (its bytes are not a '
                     f'zip file; pickled data is never loaded).') from None
  except (OSError, EOFError, zipfile.BadZipFile) as error:
    raise ValueError(f'{where}: {_first_line(error)}.') from None
  if not isinstance(saved, np.lib.npyio.NpzFile):  # One .npy array.
    raise ValueError(f'{where}: it is one .npy array, not an .npz archive '
                     f'of window and weights.')
  with saved:
    missing = [name for name in ('window', 'weights') if name not in saved]
    if missing:
      raise ValueError(f'{where}: it has no {" or ".join(missing)} array '
                       f'(it holds {", ".join(saved.files) or "none"}).')
    try:
      return saved['window'], saved['weights']
    except (ValueError, OSError, EOFError, zipfile.BadZipFile,
            zlib.error) as error:  # Object arrays, a damaged member.
      raise ValueError(f'{where}: {_first_line(error)}.') from None


def _first_line(error: Exception) -> str:
  """An exception's message in one line, without its full stop."""
  lines = str(error).strip().splitlines()
  return lines[0].rstrip('.') if lines else type(error).__name__


def _scale(low: np.ndarray, high: np.ndarray) -> int:
  """f of square inputs [N, h, h, C] and targets [N, h*f, h*f, C]."""
  if (low.ndim != 4 or high.ndim != 4 or len(low) != len(high)
      or low.shape[-1] != high.shape[-1] or low.shape[1] != low.shape[2]
      or high.shape[1] != high.shape[2] or high.shape[1] % low.shape[1]):
    raise ValueError(f'inputs {low.shape} and targets {high.shape} are not '
                     f'square [N, h, h, C] and [N, h*f, h*f, C] images.')
  return high.shape[1] // low.shape[1]


def _chunk(low: np.ndarray, window: int) -> int:
  """Images whose input windows fit in _CHUNK_VALUES float64s."""
  _, h, w, channels = low.shape
  return max(1, _CHUNK_VALUES // (h * w * window * window * channels))


def _by_phase(images: np.ndarray, scale: int) -> np.ndarray:
  """[n, h*f, w*f, C] -> float64 [C, f, f, n h w]: output intensities by
  channel and sub-pixel phase, pixels in (image, row, column) order."""
  n, height, width, channels = images.shape
  blocks = np.asarray(images, np.float64).reshape(
      n, height // scale, scale, width // scale, scale, channels)
  return blocks.transpose(5, 2, 4, 0, 1, 3).reshape(channels, scale, scale,
                                                    -1)


def _regressors(low: np.ndarray, window: int, scale: int
                ) -> tuple[np.ndarray, np.ndarray]:
  """What the map of output pixel (y f + a, x f + b), channel c, reads,
  of uint8 inputs [n, h, w, C]: float64 [n h w, window^2 C] the window
  around input pixel (y, x) (the same for every map), and float64 [C, f,
  f, n h w, 2] that output's bicubic value and 1."""
  n, h, w, channels = low.shape
  half = window // 2
  padded = np.pad(low.astype(np.float64),
                  ((0, 0), (half, half), (half, half), (0, 0)), mode='edge')
  around = np.concatenate([padded[:, dy:dy + h, dx:dx + w]
                           for dy in range(window) for dx in range(window)],
                          axis=-1).reshape(n * h * w, -1)
  cubic = _by_phase(tokens.bicubic(low, h * scale), scale)
  return around, np.stack([cubic, np.ones_like(cubic)], axis=-1)
