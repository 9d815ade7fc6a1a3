"""The least-squares reference filter: what it reads, what it fits, where
a run keeps it."""

import os

import numpy as np
import pytest

from bpd_jax.tasks.images import embedded_photos
from bpd_jax.tasks.images import fitted_filter
from bpd_jax.tasks.images import tokens

FittedFilter = fitted_filter.FittedFilter


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
    fitted_filter.reference_filter(workdir, 3, training_images, train=False)
  first = fitted_filter.reference_filter(workdir, 3, training_images,
                                         train=True)
  assert os.path.exists(os.path.join(workdir, fitted_filter.FILE_NAME))
  again = fitted_filter.reference_filter(workdir, 3, training_images,
                                         train=False)
  assert calls == [1] and again.fingerprint == first.fingerprint
  with pytest.raises(ValueError, match='asks for task.reference_window=5'):
    fitted_filter.reference_filter(workdir, 5, training_images, train=True)


def test_another_runs_filter_is_read_never_fitted(tmp_path):
  low = random_low()
  first = fitted_filter.reference_filter(
      str(tmp_path / 'base'), 1, lambda: (low, tokens.bicubic(low, 8)), True)
  never = lambda: pytest.fail('fitted where a file was named')
  path = str(tmp_path / 'base' / fitted_filter.FILE_NAME)
  read = fitted_filter.reference_filter(str(tmp_path / 'heads'), 1, never,
                                        True, path)
  assert read.fingerprint == first.fingerprint
  assert not (tmp_path / 'heads').exists()
  with pytest.raises(FileNotFoundError, match='task.reference_path='):
    fitted_filter.reference_filter(str(tmp_path / 'heads'), 1, never, True,
                                   str(tmp_path / 'missing.npz'))
