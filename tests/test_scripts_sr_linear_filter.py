"""scripts/sr_linear_filter.py: the least-squares filter over the input's
neighbourhood, on a few hundred crops."""

import numpy as np

from bpd_jax.evaluation import image as image_eval
from bpd_jax.tasks.images import embedded_photos
from bpd_jax.tasks.images import tokens

from train_configs import load_script

sr_linear_filter = load_script('sr_linear_filter')


def test_neighbourhoods_hold_the_window_around_each_output_pixel():
  low = np.arange(2 * 8 * 8 * 3, dtype=np.uint8).reshape(2, 8, 8, 3)
  near = sr_linear_filter.neighbourhoods(low, 3)
  assert near.shape == (2, 16, 16, 27)
  # Output pixel (5, 9) lies under input pixel (2, 4): its window is input
  # rows 1..3 and columns 3..5, every channel.
  expected = low[1, 1:4, 3:6].astype(float).reshape(-1)
  np.testing.assert_array_equal(near[1, 5, 9], expected)
  # At the corner the edge pixel repeats.
  assert near[0, 0, 0, :3].tolist() == low[0, 0, 0].tolist()


def test_the_fitted_filter_is_no_worse_than_bicubic_where_it_was_fitted():
  """Bicubic is one of the regressors: in sample, least squares can only
  lower the squared error (rounding aside)."""
  crops = embedded_photos.crops('train', 200, 16, 8)
  out = sr_linear_filter.filtered(3, crops, crops)
  bicubic = tokens.bicubic(crops[0], 16)
  error = lambda x: np.mean((x.astype(float) - crops[1]) ** 2)
  assert error(out) < error(bicubic)
  assert image_eval.psnr(crops[1], out) > image_eval.psnr(crops[1], bicubic)
