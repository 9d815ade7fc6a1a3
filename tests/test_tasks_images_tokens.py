"""Image tokens and area downsampling."""

import numpy as np
import pytest
from skimage import transform

from bpd_jax.infra import token_ids
from bpd_jax.tasks.images import tokens as image_tokens


def random_images(shape, seed=0):
  return np.random.default_rng(seed).integers(0, 256, shape, np.uint8)


def test_tokens_are_raster_order_intensities_plus_three():
  image = random_images((4, 5, 3))
  tokens = image_tokens.to_tokens(image)
  assert tokens.dtype == np.int32 and tokens.shape == (60,)
  row, col, channel = 2, 3, 1
  assert tokens[(row * 5 + col) * 3 + channel] == image[row, col, channel] + 3
  batch = random_images((2, 7, 4, 5, 3))
  assert image_tokens.to_tokens(batch).shape == (2, 7, 60)
  np.testing.assert_array_equal(
      image_tokens.from_tokens(image_tokens.to_tokens(batch), (4, 5, 3)), batch)


def test_token_distance_is_intensity_distance():
  a, b = random_images((8, 8, 3), 1), random_images((8, 8, 3), 2)
  np.testing.assert_array_equal(
      np.abs(image_tokens.to_tokens(a) - image_tokens.to_tokens(b)),
      np.abs(a.astype(int) - b.astype(int)).reshape(-1))


def test_vocabulary_keeps_the_special_ids():
  vocab = image_tokens.ImageVocabulary()
  assert vocab.vocab_size == image_tokens.VOCAB_SIZE == 259
  assert (vocab.pad_id, vocab.eos_id, vocab.bos_id) == (
      token_ids.PAD_ID, token_ids.EOS_ID, token_ids.BOS_ID)
  assert image_tokens.to_tokens(np.zeros((1, 1, 1), np.uint8))[0] == 3
  assert image_tokens.to_tokens(np.full((1, 1, 1), 255, np.uint8))[0] == 258


def test_special_ids_become_black_and_are_counted():
  tokens = np.array([[3, 258, token_ids.EOS_ID, token_ids.PAD_ID],
                     [4, 5, 6, 7]])
  out = image_tokens.from_tokens(tokens, (2, 2, 1))
  np.testing.assert_array_equal(out[0, :, :, 0], [[0, 255], [0, 0]])
  np.testing.assert_array_equal(image_tokens.count_special(tokens), [2, 0])


@pytest.mark.parametrize('tokens,shape,message', [
    (np.full((2, 10), 3), (2, 2, 3), r'\(2, 10\) have 10 ids a row; an '
     r'image of shape \(2, 2, 3\) has 12'),
    (np.full((12,), 259), (2, 2, 3), r'must be in \[0, 259\); got \[259, 259'),
    (np.full((12,), -1), (2, 2, 3), r'got \[-1, -1\]'),
])
def test_from_tokens_errors(tokens, shape, message):
  with pytest.raises(ValueError, match=message):
    image_tokens.from_tokens(tokens, shape)


def test_to_tokens_needs_uint8_images():
  with pytest.raises(ValueError, match='must be uint8'):
    image_tokens.to_tokens(np.zeros((2, 2, 3), np.float32))


def test_center_crop_is_the_central_square():
  image = random_images((218, 178, 3))
  np.testing.assert_array_equal(image_tokens.center_crop(image), image[20:198])
  wide = random_images((2, 5, 8, 3))
  np.testing.assert_array_equal(image_tokens.center_crop(wide), wide[:, :, 1:6])


def skimage_area(image, size):
  return np.rint(transform.resize_local_mean(
      image.astype(np.float64), (size, size), channel_axis=-1,
      preserve_range=True)).astype(np.uint8)


@pytest.mark.parametrize('shape,size', [((32, 32, 3), 8), ((12, 12, 3), 4),
                                        ((178, 178, 3), 32),
                                        ((32, 32, 3), 8 - 1)])
def test_downsample_is_the_area_mean(shape, size):
  image = random_images(shape)
  out = image_tokens.downsample(image, size)
  assert out.shape == (size, size, 3) and out.dtype == np.uint8
  np.testing.assert_array_equal(out, skimage_area(image, size))
  batch = np.stack([image, 255 - image])
  np.testing.assert_array_equal(image_tokens.downsample(batch, size)[0], out)


def test_downsample_integer_factor_is_exact_block_mean():
  image = random_images((16, 16, 3))
  blocks = image.reshape(4, 4, 4, 4, 3).astype(np.float64).mean(axis=(1, 3))
  np.testing.assert_array_equal(image_tokens.downsample(image, 4), np.rint(blocks))
  flat = np.full((2, 178, 178, 3), 77, np.uint8)
  assert (image_tokens.downsample(flat, 32) == 77).all()


def test_area_weights_rows_sum_to_one():
  weights = image_tokens.area_weights(178, 32)
  np.testing.assert_allclose(weights.sum(axis=1), 1.0)
  np.testing.assert_allclose(weights.sum(axis=0), 32 / 178)


def test_downsample_only_shrinks():
  with pytest.raises(ValueError, match=r'8x8 images to 9x9'):
    image_tokens.downsample(random_images((8, 8, 3)), 9)


def test_super_resolution_pair():
  low, high = image_tokens.super_resolution_pair(random_images((3, 64, 64, 3)), 16,
                                           4)
  assert low.shape == (3, 4, 4, 3) and high.shape == (3, 16, 16, 3)
  np.testing.assert_array_equal(low, image_tokens.downsample(high, 4))
  with pytest.raises(ValueError, match='high_res=16 must be a multiple of '
                     'low_res=5'):
    image_tokens.super_resolution_pair(random_images((1, 64, 64, 3)), 16, 5)


def test_bicubic_keeps_a_flat_image_flat():
  low = np.full((2, 4, 4, 3), 77, np.uint8)
  up = image_tokens.bicubic(low, 16)
  assert up.shape == (2, 16, 16, 3) and up.dtype == np.uint8
  assert (up == 77).all()


def test_residual_targets_round_trip_and_are_zero_at_bicubic():
  rng = np.random.default_rng(0)
  high = rng.integers(0, 256, (3, 8, 8, 3), dtype=np.uint8)
  low, high = image_tokens.super_resolution_pair(high, 8, 4)
  vocab = image_tokens.ImageVocabulary('residuals')
  assert vocab.vocab_size == 3 + 511
  ids = vocab.encode(low, high)
  assert ids.shape == (3, 8 * 8 * 3)
  assert ids.min() >= 3 and ids.max() < vocab.vocab_size
  np.testing.assert_array_equal(vocab.decode(ids, low, (8, 8, 3)), high)
  # Residual 0 everywhere is bicubic's image.
  zero = np.full_like(ids, image_tokens.RESIDUAL_ZERO_ID)
  np.testing.assert_array_equal(vocab.decode(zero, low, (8, 8, 3)),
                                image_tokens.bicubic(low, 8))
  # Ids keep the intensities' distances at one place.
  shifted = vocab.decode(ids + 5, low, (8, 8, 3)).astype(int)
  inside = high.astype(int) + 5 <= 255
  np.testing.assert_array_equal(shifted[inside], high[inside] + 5)
  # Values past [0, 255] clip; special ids are black.
  assert vocab.decode(np.full_like(ids, 513), low, (8, 8, 3)).min() == 255
  assert vocab.decode(np.zeros_like(ids), low, (8, 8, 3)).max() == 0


def test_residuals_from_a_fitted_reference():
  """Residual 0 is the reference's image; the fingerprint names it."""
  from bpd_jax.tasks.images import fitted_filter
  low, high = image_tokens.super_resolution_pair(
      random_images((6, 8, 8, 3)), 8, 4)
  fitted = fitted_filter.FittedFilter.fit(low, high, 3)
  vocab = image_tokens.ImageVocabulary('residuals', fitted)
  ids = vocab.encode(low, high)
  np.testing.assert_array_equal(vocab.decode(ids, low, (8, 8, 3)), high)
  zero = np.full_like(ids, image_tokens.RESIDUAL_ZERO_ID)
  np.testing.assert_array_equal(vocab.decode(zero, low, (8, 8, 3)),
                                fitted(low))
  assert vocab.fingerprint == f'residuals-514-{fitted.fingerprint}'
  with pytest.raises(ValueError, match='the targets have 16'):
    vocab.encode(low, image_tokens.bicubic(low, 16))
  with pytest.raises(ValueError, match="task.targets='intensities' has none"):
    image_tokens.ImageVocabulary('intensities', fitted)


def test_target_forms():
  assert image_tokens.ImageVocabulary().vocab_size == image_tokens.VOCAB_SIZE
  assert image_tokens.ImageVocabulary().fingerprint == 'intensities-259'
  assert image_tokens.ImageVocabulary('residuals').fingerprint == (
      'residuals-514')
  with pytest.raises(ValueError, match="task.targets='deltas' is not one of"):
    image_tokens.ImageVocabulary('deltas')
