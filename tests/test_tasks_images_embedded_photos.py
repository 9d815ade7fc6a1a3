"""Crops of the photos shipped with scikit-image and matplotlib."""

import numpy as np
import pytest

from bpd_jax.tasks.images import embedded_photos
from bpd_jax.tasks.images import tokens as image_tokens


def test_photos_are_real_colour_images_split_by_photo():
  names = [name for split in embedded_photos.SPLITS
           for name in embedded_photos.PHOTOS[split]]
  assert len(names) == len(set(names)) == 9  # Each photo in one split only.
  for name in names:
    photo = embedded_photos.photo(name)
    assert photo.dtype == np.uint8 and photo.ndim == 3 and photo.shape[2] == 3
    assert min(photo.shape[:2]) >= 300 and photo.std() > 20
  with pytest.raises(ValueError, match="photo 'lena' is not one of"):
    embedded_photos.photo('lena')


def test_crops_are_seeded_pairs():
  low, high = embedded_photos.crops('train', 300, 16, 4)
  assert low.shape == (300, 4, 4, 3) and high.shape == (300, 16, 16, 3)
  assert low.dtype == high.dtype == np.uint8
  np.testing.assert_array_equal(low, image_tokens.downsample(high, 4))
  again = embedded_photos.crops.__wrapped__('train', 300, 16, 4)
  np.testing.assert_array_equal(again[1], high)
  other = embedded_photos.crops('train', 300, 16, 4, seed=1)[1]
  assert (other != high).any()
  assert len({crop.tobytes() for crop in high}) > 290  # Few repeats.
  assert not high.flags.writeable  # Cached and shared.


def test_a_crop_at_scale_f_is_the_downsampled_photo_region():
  photo = embedded_photos.photo('coffee')
  scaled = embedded_photos._scaled('coffee', 4)
  top, left, side = 17, 30, 16
  region = photo[top * 4:(top + side) * 4, left * 4:(left + side) * 4]
  np.testing.assert_array_equal(scaled[top:top + side, left:left + side],
                                image_tokens.downsample(region, side))


def occurs_in(crop, photo):
  """Whether `crop` [s, s, 3] is a window of `photo`."""
  side = crop.shape[0]
  ys, xs = np.nonzero((photo[:1 - side or None, :1 - side or None] ==
                       crop[0, 0]).all(axis=-1))
  return any((photo[y:y + side, x:x + side] == crop).all()
             for y, x in zip(ys, xs))


def test_validation_crops_come_from_validation_photos_only():
  _, high = embedded_photos.crops('validation', 12, 16, 8, scales=(1,))
  astronaut = embedded_photos.photo('astronaut')
  assert all(occurs_in(crop, astronaut) for crop in high)
  _, train = embedded_photos.crops('train', 12, 16, 8, scales=(1,))
  assert not any(occurs_in(crop, astronaut) for crop in train)


@pytest.mark.parametrize('args,message', [
    (('dev', 10, 16, 8), "split 'dev' is not one of"),
    (('train', 0, 16, 8), 'count=0'),
    (('train', 10, 16, 8, (0,)), r'scales=\(0,\)'),
    (('test', 10, 128, 8, (8,)), 'no test photo at scales'),
])
def test_errors(args, message):
  with pytest.raises(ValueError, match=message):
    embedded_photos.crops(*args)


def test_a_missing_photo_file_names_its_package(monkeypatch):
  monkeypatch.setitem(embedded_photos._FILES, 'ghost', ('skimage', 'ghost.png'))
  with pytest.raises(FileNotFoundError, match="photo 'ghost' not found at "
                     '.*ghost.png: it ships with skimage'):
    embedded_photos.photo('ghost')
