"""The least-squares reference filter: what it reads, what it fits, where
a run keeps it."""

import os

import numpy as np
import pytest

from bpd_jax.tasks.images import embedded_photos
from bpd_jax.tasks.images import fitted_filter
from bpd_jax.tasks.images import tokens

FittedFilter = fitted_filter.FittedFilter
SHAPE = dict(channels=3, scale=2)  # random_low's, upsampled to 8x8.


def random_low(n=40, side=4, seed=0):
  return np.random.default_rng(seed).integers(0, 256, (n, side, side, 3),
                                              np.uint8)


def test_it_finds_a_map_of_the_window_exactly():
  """Each output pixel the input pixel to the right of the one under it
  (edge repeated), channels swapped: reachable by a 3x3 window only in
  the right place and orientation."""
  low = random_low()
  right = np.concatenate([low[:, :, 1:], low[:, :, -1:]], axis=2)[..., ::-1]
  high = right.repeat(2, axis=1).repeat(2, axis=2)
  fitted = FittedFilter.fit(low, high, 3)
  assert fitted.scale == 2 and fitted.weights.shape == (3, 2, 2, 29)
  np.testing.assert_array_equal(fitted(random_low(seed=1)), np.concatenate(
      [random_low(seed=1)[:, :, 1:], random_low(seed=1)[:, :, -1:]],
      axis=2)[..., ::-1].repeat(2, axis=1).repeat(2, axis=2))


def test_bicubic_is_among_its_maps():
  low = random_low()
  fitted = FittedFilter.fit(low, tokens.bicubic(low, 8), 1)
  np.testing.assert_array_equal(fitted(low[:3]), tokens.bicubic(low[:3], 8))


def test_it_is_no_worse_than_bicubic_where_it_was_fitted():
  """Bicubic is one of its candidates: in sample, least squares can only
  lower the squared error (rounding aside)."""
  low, high = embedded_photos.crops('train', 200, 16, 8)
  error = lambda x: np.mean((x.astype(float) - high) ** 2)
  assert error(FittedFilter.fit(low, high, 3)(low)) < error(
      tokens.bicubic(low, 16))


def test_it_clips_and_keeps_batch_dimensions():
  low = random_low()
  fitted = FittedFilter.fit(low, np.full((40, 8, 8, 3), 255, np.uint8), 1)
  fitted = FittedFilter(1, fitted.weights * 2)  # Past 255 everywhere.
  out = fitted(low.reshape(4, 10, 4, 4, 3))
  assert out.shape == (4, 10, 8, 8, 3) and out.dtype == np.uint8
  assert (out == 255).all()


def test_a_flat_training_set_still_fits():
  """A singular Gram matrix (every regressor constant) has a solution."""
  low = np.full((5, 4, 4, 3), 9, np.uint8)
  fitted = FittedFilter.fit(low, np.full((5, 8, 8, 3), 9, np.uint8), 3)
  assert (fitted(low) == 9).all()


@pytest.mark.parametrize('call, message', [
    (lambda: FittedFilter.fit(random_low(), random_low(), 2),
     'window=2 must be a positive odd integer'),
    (lambda: FittedFilter.fit(random_low(), random_low(n=3, side=8), 1),
     'are not square'),
    (lambda: FittedFilter.fit(random_low(n=0), random_low(n=0, side=8), 1),
     'no images'),
])
def test_bad_input_is_refused(call, message):
  with pytest.raises(ValueError, match=message):
    call()


def test_saved_and_loaded_it_is_the_same_filter(tmp_path):
  low = random_low()
  fitted = FittedFilter.fit(low, tokens.bicubic(low, 8), 3)
  path = str(tmp_path / 'f.npz')
  fitted.save(path)
  loaded = FittedFilter.load(path)
  assert loaded.window == 3 and loaded.fingerprint == fitted.fingerprint
  np.testing.assert_array_equal(loaded(low), fitted(low))
  other = FittedFilter(3, fitted.weights + 1e-9)
  assert other.fingerprint != fitted.fingerprint
  assert fitted.fingerprint.startswith('linear3-')


def test_a_run_fits_it_once_and_reads_it_after(tmp_path):
  low = random_low()
  calls = []

  def training_images():
    calls.append(1)
    return low, tokens.bicubic(low, 8)

  workdir = str(tmp_path / 'run')
  with pytest.raises(FileNotFoundError, match='the training job fits'):
    fitted_filter.reference_filter(workdir, 3, training_images, train=False,
                                   **SHAPE)
  first = fitted_filter.reference_filter(workdir, 3, training_images,
                                         train=True, **SHAPE)
  assert os.path.exists(os.path.join(workdir, fitted_filter.FILE_NAME))
  again = fitted_filter.reference_filter(workdir, 3, training_images,
                                         train=False, **SHAPE)
  assert calls == [1] and again.fingerprint == first.fingerprint
  with pytest.raises(ValueError, match='asks for task.reference_window=5'):
    fitted_filter.reference_filter(workdir, 5, training_images, train=True,
                                   **SHAPE)


def test_another_runs_filter_is_read_never_fitted(tmp_path):
  low = random_low()
  first = fitted_filter.reference_filter(
      str(tmp_path / 'base'), 1, lambda: (low, tokens.bicubic(low, 8)), True,
      **SHAPE)
  never = lambda: pytest.fail('fitted where a file was named')
  path = str(tmp_path / 'base' / fitted_filter.FILE_NAME)
  read = fitted_filter.reference_filter(str(tmp_path / 'heads'), 1, never,
                                        True, path, **SHAPE)
  assert read.fingerprint == first.fingerprint
  assert not (tmp_path / 'heads').exists()
  with pytest.raises(FileNotFoundError, match='task.reference_path='):
    fitted_filter.reference_filter(str(tmp_path / 'heads'), 1, never, True,
                                   str(tmp_path / 'missing.npz'), **SHAPE)


def saved_filter(path, **arrays):
  """Writes `arrays` where a run keeps its filter; returns the path."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  np.savez(path, **arrays)
  return path


def fitted_weights(channels=3, window=3):
  """Weights of a window x window filter of 2x upsampling, as fit gives."""
  return np.random.default_rng(0).normal(
      size=(channels, 2, 2, window * window * channels + 2))


def write_bytes(path, data):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'wb') as f:
    f.write(data)


def garbage(path):
  write_bytes(path, b'not a filter at all\n' * 4)


def truncated(path):
  saved_filter(path, window=3, weights=fitted_weights())
  with open(path, 'rb') as f:
    data = f.read()
  write_bytes(path, data[:len(data) // 2])


def one_array(path):
  write_bytes(path, b'')
  np.save(open(path, 'wb'), fitted_weights())


def with_nan(path):
  weights = fitted_weights()
  weights[1, 0, 1, 5] = np.nan
  saved_filter(path, window=3, weights=weights)


@pytest.mark.parametrize('damage, message', [
    (with_nan, 'holds 1 NaN or infinite weights of 348'),
    (lambda path: saved_filter(path, window=3, weights=fitted_weights(1)),
     'was fitted on 1-channel images upsampled 2x; the task\'s are '
     '3-channel, upsampled 2x'),
    (garbage, 'is not a saved reference filter: it is no .npz archive'),
    (truncated, 'is not a saved reference filter: File is not a zip file'),
    (one_array, 'is not a saved reference filter: it is one .npy array'),
    (lambda path: saved_filter(path, weights=fitted_weights()),
     r'it has no window array \(it holds weights\)'),
    (lambda path: saved_filter(path, window=np.array([3, 3]),
                               weights=fitted_weights()),
     r'holds window=array\(\[3, 3\]\): not a positive odd integer'),
    (lambda path: saved_filter(path, window=3,
                               weights=fitted_weights().astype(object)),
     'Object arrays cannot be loaded'),
    (lambda path: saved_filter(path, window=3,
                               weights=fitted_weights()[..., :-1]),
     r'holds float64 weights of shape \(3, 2, 2, 28\): a 3x3 filter\'s are '
     r'float \[C, f, f, 9C \+ 2\]'),
])
def test_a_damaged_filter_in_the_workdir_is_one_line_naming_it(
    tmp_path, damage, message):
  """Found in the workdir, checked before it is used: NaN weights, another
  task's filter or a file that is not one are refused by name, with the
  fix, never fitted over (nor trained on)."""
  workdir = str(tmp_path / 'run')
  path = os.path.join(workdir, fitted_filter.FILE_NAME)
  damage(path)
  never = lambda: pytest.fail('fitted over a file that is there')
  for train in (True, False):
    with pytest.raises(ValueError, match=message) as raised:
      fitted_filter.reference_filter(workdir, 3, never, train, **SHAPE)
    text = str(raised.value)
    assert '\n' not in text and text.startswith(path)
    assert text.endswith('Delete it and the training job fits it again.')


def test_another_runs_damaged_filter_names_the_field(tmp_path):
  path = str(tmp_path / 'base' / fitted_filter.FILE_NAME)
  saved_filter(path, window=1, weights=fitted_weights(window=1) * np.inf)
  with pytest.raises(ValueError, match=r'NaN or infinite weights of 60\. '
                     r'task.reference_path names the reference_filter.npz of '
                     r'a run trained with') as raised:
    fitted_filter.reference_filter(str(tmp_path / 'heads'), 1, None, True,
                                   path, **SHAPE)
  assert str(raised.value).startswith(path)
  assert not (tmp_path / 'heads').exists()
