"""Position encodings: image raster codes, the input skip, ImagePositions."""

import jax.numpy as jnp
import numpy as np
import pytest

from bpd_jax.models import positions
from bpd_jax.models.positions import ImagePositions


def test_raster_codes_match_across_resolutions():
  """The centre of an input pixel and of the output pixels over it: near
  codes; a pixel elsewhere: a distant one."""
  code = lambda position, side: positions.raster_codes(
      jnp.array([position]), side, 3, 64)[0]
  # Input pixel (1, 1) of a 2x2 image is output pixels (2..3, 2..3) of 4x4.
  source = code((1 * 2 + 1) * 3, 2)
  inside = code((2 * 4 + 2) * 3 + 1, 4)   # Pixel (2, 2), channel 1.
  outside = code((0 * 4 + 3) * 3, 4)      # Pixel (0, 3).
  assert jnp.linalg.norm(source - inside) < jnp.linalg.norm(source - outside)
  # Channels share their pixel's code (the model adds a channel embedding).
  np.testing.assert_allclose(code(9, 4), code(11, 4))


def test_source_skip_reads_the_input_pixel_under_each_output_pixel():
  image = ImagePositions(source_side=2, target_side=4, channels=1,
                         source_skip=True)
  # Output pixel (row, column) of 4x4 lies under input pixel (row // 2,
  # column // 2) of 2x2; positions past the image take the last row.
  under = positions.source_under(jnp.arange(18), image)
  np.testing.assert_array_equal(
      under, [0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3, 2, 2])


def test_source_window_reads_the_neighbourhood_with_edges_repeated():
  # A 2x2 single-channel input with ids 10, 20 / 30, 40, 4x4 output.
  image = ImagePositions(source_side=2, target_side=4, channels=1,
                         source_window=3)
  source = jnp.array([[10, 20, 30, 40]])
  window = positions.source_window_values(source, jnp.array([[0, 15]]),
                                          image)
  assert window.shape == (1, 2, 9)
  ids = np.rint((np.asarray(window) + 1.0) * 128).astype(int)
  # Output pixel (0, 0) lies under input pixel (0, 0): rows -1..1 and
  # columns -1..1 around it, the nearest edge pixel outside the image.
  np.testing.assert_array_equal(ids[0, 0], [10, 10, 20, 10, 10, 20,
                                            30, 30, 40])
  # Output pixel (3, 3) under input pixel (1, 1).
  np.testing.assert_array_equal(ids[0, 1], [10, 20, 20, 30, 40, 40,
                                            30, 40, 40])


def test_source_window_keeps_channels_apart_and_phase_is_the_place():
  image = ImagePositions(source_side=2, target_side=4, channels=3,
                         source_window=1)
  source = jnp.arange(12)[None] + 100   # Pixel p, channel c: 100 + 3p + c.
  # Output pixel (1, 2), every channel: under input pixel (0, 1).
  window = positions.source_window_values(
      source, jnp.array([[18, 19, 20]]), image)
  ids = np.rint((np.asarray(window) + 1.0) * 128).astype(int)
  np.testing.assert_array_equal(ids[0], [[103, 104, 105]] * 3)
  # Sub-pixel phases of the 4x4 output's first two rows: 0 1 0 1 / 2 3 2 3.
  phase = positions.subpixel_phase(jnp.arange(0, 24, 3), image)
  np.testing.assert_array_equal(phase, [0, 1, 0, 1, 2, 3, 2, 3])


@pytest.mark.parametrize('image,encoder_decoder,d_model,message', [
    (ImagePositions(target_side=4), True, 16,
     'image.source_side=0 must be an integer >= 1'),
    (ImagePositions(target_side=4), False, 16, None),  # No source image.
    (ImagePositions(source_side=2, target_side=0), True, 16,
     'image.target_side=0 must be'),
    (ImagePositions(source_side=2, target_side=4), True, 18,
     'd_model=18 must be a multiple of 4'),
    (ImagePositions(target_side=4, source_skip=True), False, 16,
     'image.source_skip needs an encoder'),
    (ImagePositions(target_side=4, channels=True), False, 16,
     'image.channels=True must be an integer >= 1'),
    (ImagePositions(source_side=2, target_side=4, source_window=2), True,
     16, 'image.source_window=2 must be 0 or an odd integer'),
    (ImagePositions(target_side=4, source_window=3), False, 16,
     'image.source_window needs an encoder'),
    (ImagePositions(source_side=3, target_side=4, source_window=3), True,
     16, 'needs target_side (4) a multiple of source_side (3)'),
])
def test_problems_name_the_field(image, encoder_decoder, d_model, message):
  found = image.problems(encoder_decoder, d_model)
  if message is None:
    assert found == []
  else:
    assert message in found[0]


def test_pop_from_a_config_model_section():
  fields = dict(size='tiny', positions='image', source_image_side=8,
                target_image_side=16, image_channels=3,
                image_source_skip=True)
  image = ImagePositions.pop_from(fields)
  assert image == ImagePositions(8, 16, 3, True)
  assert fields == dict(size='tiny', positions='image')
  text = dict(size='tiny', positions='sinusoidal')
  assert ImagePositions.pop_from(text) is None and text == dict(
      size='tiny', positions='sinusoidal')
