"""Crops of the photos shipped with scikit-image and matplotlib, and the
'embedded_images' task."""

import ml_collections
import numpy as np
import pytest

from bpd_jax import tasks
from bpd_jax.infra import errors
from bpd_jax.tasks import batching
from bpd_jax.tasks.images import embedded_photos
from bpd_jax.tasks.images import fitted_filter
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


def image_config(**overrides):
  return ml_collections.ConfigDict({**dict(
      name='embedded_images', high_res=16, low_res=4,
      sizes=dict(train=40, validation=6), max_source_len=48,
      max_target_len=768), **overrides})


def test_embedded_images_task_feeds_train_batches():
  task = tasks.load_task(image_config(), '/nonexistent')
  assert task.vocab.vocab_size == 259
  assert task.image_shape == (16, 16, 3) and task.low_res_shape == (4, 4, 3)
  encoded = task.encoded('train')
  assert len(encoded) == 40
  source, target = encoded[0]
  assert len(source) == 48 and len(target) == 768  # No eos: fixed length.
  low, high = task.images('train')
  np.testing.assert_array_equal(target, image_tokens.to_tokens(high[0]))
  np.testing.assert_array_equal(source, image_tokens.to_tokens(low[0]))
  data = batching.TrainBatches(encoded, 8, 48, 768, seed=0,
                               pad_id=task.vocab.pad_id)
  batch = data(7)
  assert batch['source'].shape == (8, 48) and batch['target'].shape == (8, 768)
  assert batch['target'].min() >= image_tokens.INTENSITY_OFFSET
  assert data.dropped == 0


def test_image_task_shares_sources_and_images():
  task = tasks.load_task(image_config(), '/nonexistent')
  shards = [task.train_examples(p, 3) for p in range(3)]
  assert [len(s) for s in shards] == [13, 13, 14]
  np.testing.assert_array_equal(shards[1][0][1], task.encoded('train')[13][1])
  sources, cut = task.sources('validation', 48, limit=4)
  assert cut == 0 and len(sources) == 4 and len(sources[0]) == 48
  assert sources[0] == task.encoded('validation')[0][0].tolist()
  low, high = task.images('validation', limit=2)
  assert low.shape == (2, 4, 4, 3) and high.shape == (2, 16, 16, 3)
  with pytest.raises(ValueError, match=r'4x4x3 input images are 48 tokens; '
                     'max_len=40'):
    task.sources('validation', 40)
  with pytest.raises(ValueError, match="split 'test' is not one of"):
    task.images('test')


def test_a_fitted_reference_is_fitted_on_training_crops_once(tmp_path):
  """task.reference 'linear': the training job fits the filter on the
  training crops and keeps it in the workdir; the other jobs read it."""
  config = image_config(targets='residuals', reference='linear',
                        reference_window=3)
  workdir = str(tmp_path)
  with pytest.raises(FileNotFoundError, match='the training job fits'):
    tasks.load_task(config, workdir, train_vocab=False)
  task = tasks.load_task(config, workdir)
  fitted = task.vocab.reference
  assert fitted.window == 3 and (tmp_path / 'reference_filter.npz').exists()
  low, high = task.images('train')
  np.testing.assert_array_equal(
      fitted(low), fitted_filter.FittedFilter.fit(low, high, 3)(low))
  again = tasks.load_task(config, workdir, train_vocab=False)
  assert again.vocab.fingerprint == task.vocab.fingerprint
  # Residual 0 is the fitted filter's image, not bicubic's.
  _, target = task.encoded('validation')[0]
  low, high = task.images('validation', 1)
  np.testing.assert_array_equal(
      target, image_tokens.to_tokens(high[0]) - image_tokens.to_tokens(
          fitted(low[0])) + image_tokens.RESIDUAL_ZERO_ID)


def test_a_workdirs_filter_for_another_task_stops_the_load(tmp_path):
  """The task's channels and scale reach the filter's check: a filter of
  2x upsampling found where the task upsamples 4x is one line, before any
  training (a DataError: exit 2)."""
  weights = np.zeros((3, 2, 2, 3 * 3 * 3 + 2))
  np.savez(tmp_path / fitted_filter.FILE_NAME, window=3, weights=weights)
  config = image_config(targets='residuals', reference='linear',
                        reference_window=3)
  with pytest.raises(errors.DataError) as raised:
    tasks.load_task(config, str(tmp_path))
  assert str(raised.value) == (
      f'{tmp_path / fitted_filter.FILE_NAME} was fitted on 3-channel images '
      f'upsampled 2x; the task\'s are 3-channel, upsampled 4x (task.high_res '
      f'/ task.low_res). Delete it and the training job fits it again.')


@pytest.mark.parametrize('overrides,message', [
    (dict(high_res=16, low_res=5), 'task.high_res=16 must be a multiple of '
     'task.low_res=5'),
    (dict(sizes=dict(train=4, dev=2)), r"task.sizes has splits \['dev'\]"),
    (dict(targets='residuals', reference='lanczos'),
     "task.reference='lanczos' is not one of"),
    (dict(reference='linear'), "needs task.targets='residuals'"),
    (dict(targets='residuals', reference='linear', reference_window=4),
     'task.reference_window=4 must be a positive odd integer'),
])
def test_image_task_errors(overrides, message):
  with pytest.raises(ValueError, match=message):
    tasks.load_task(image_config(**overrides), '/nonexistent')
