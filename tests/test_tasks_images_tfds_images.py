"""CelebA through TFDS on mock data: from TFDS to super-resolution batches.

`tfds.testing.mock_data` (policy USE_CODE) serves random 218x178x3 images
through `tfds.data_source`, without TensorFlow and without a download; the
data dir must exist and hold the dataset's directory, as `tfds build` leaves
it.
"""

import io
import sys
import types

import ml_collections
import numpy as np
import pytest
import tensorflow_datasets as tfds
from PIL import Image

from bpd_jax import tasks
from bpd_jax.tasks import batching
from bpd_jax.tasks.images import tfds_images
from bpd_jax.tasks.images import tokens as image_tokens

EXAMPLES = 12  # Per split (the mock ignores the split's real size).


def prepared_data_dir(tmp_path):
  data_dir = tmp_path / 'tfds'
  full_name = tfds.builder('celeb_a', data_dir=str(data_dir)).info.full_name
  (data_dir / full_name).mkdir(parents=True, exist_ok=True)  # celeb_a/2.1.0
  return str(data_dir)


@pytest.fixture
def mock_celeba():
  with tfds.testing.mock_data(num_examples=EXAMPLES,
                              policy=tfds.testing.MockPolicy.USE_CODE):
    yield


def celeba_config(data_dir, **overrides):
  return ml_collections.ConfigDict({**dict(
      name='tfds_images', dataset='celeb_a', data_dir=data_dir,
      splits=dict(train='train', validation='validation', test='test'),
      high_res=32, low_res=8, mock_examples=0, max_source_len=192,
      max_target_len=3072), **overrides})


def test_pipeline_from_tfds_to_batches(tmp_path, mock_celeba):
  workdir = tmp_path / 'work'
  task = tasks.load_task(celeba_config(prepared_data_dir(tmp_path)),
                         str(workdir))
  low, high = task.images('test')
  assert low.shape == (EXAMPLES, 8, 8, 3) and high.shape == (EXAMPLES, 32,
                                                             32, 3)
  # The paper's preprocessing, recomputed from the decoded image.
  source = tfds_images.open_sources('celeb_a', prepared_data_dir(tmp_path),
                                    dict(test='test'), 32)['test']
  image = source[3]
  assert image.shape == (218, 178, 3) and image.dtype == np.uint8
  expected = image_tokens.downsample(image[20:198], 32)
  np.testing.assert_array_equal(high[3], expected)
  np.testing.assert_array_equal(low[3], image_tokens.downsample(expected, 8))

  encoded = task.encoded('train')
  source_ids, target_ids = encoded[0]
  assert len(source_ids) == 192 and len(target_ids) == 3072
  data = batching.TrainBatches(encoded, 4, 192, 3072, seed=0,
                               pad_id=task.vocab.pad_id)
  assert data(1)['target'].shape == (4, 3072)
  assert data(1)['target'].min() >= image_tokens.INTENSITY_OFFSET
  # Token-count batches of this process's shard: one bucket, 3072 long.
  buckets = batching.BucketedBatches(task.train_examples(0, 1), (3072,),
                                     4 * 3072, 192, 3072, seed=0,
                                     pad_id=task.vocab.pad_id)
  batch = buckets(5)
  assert batch['source'].shape == (4, 192) and batch['target'].shape == (4,
                                                                         3072)


def test_shards_are_disjoint_cover_and_are_cached(tmp_path, mock_celeba):
  workdir = tmp_path / 'work'
  config = celeba_config(prepared_data_dir(tmp_path))
  task = tasks.load_task(config, str(workdir))
  whole = task.train_examples(0, 1)
  thirds = [task.train_examples(p, 3) for p in range(3)]
  assert [len(t) for t in thirds] == [4, 4, 4]
  np.testing.assert_array_equal(
      np.concatenate([t.high for t in thirds]), whole.high)
  np.testing.assert_array_equal(
      np.concatenate([t.low for t in thirds]), whole.low)
  cache = workdir / 'data' / 'celeb_a.train.32from8.1-of-3.npz'
  assert cache.exists()
  stamp = cache.stat().st_mtime_ns
  again = tasks.load_task(config, str(workdir)).train_examples(1, 3)
  np.testing.assert_array_equal(again.high, thirds[1].high)
  assert cache.stat().st_mtime_ns == stamp


def test_mock_examples_needs_no_data_dir(tmp_path):
  config = celeba_config('', mock_examples=5, high_res=16, low_res=4)
  task = tasks.load_task(config, str(tmp_path / 'work'))
  low, high = task.images('validation')
  assert low.shape == (5, 4, 4, 3) and high.shape == (5, 16, 16, 3)
  assert (tmp_path / 'work' / 'data' /
          'celeb_a.mock5.validation.16from4.0-of-1.npz').exists()


def test_a_stored_record_decodes_without_tensorflow(tmp_path):
  """Real records hold JPEG bytes: TFDS decodes them with Pillow, no TF."""
  features = tfds.builder('celeb_a', data_dir=str(tmp_path)).info.features
  image = np.random.default_rng(0).integers(0, 256, (218, 178, 3), np.uint8)
  jpeg = io.BytesIO()
  Image.fromarray(image).save(jpeg, format='JPEG')
  record = features.serialize_example(dict(
      image=io.BytesIO(jpeg.getvalue()),
      landmarks={name: 0 for name in features['landmarks'].keys()},
      attributes={name: False for name in features['attributes'].keys()},
      identity=dict(Identity_No=1)))
  decoded = features.deserialize_example_np(record)['image']
  np.testing.assert_array_equal(
      decoded, np.asarray(Image.open(io.BytesIO(jpeg.getvalue()))))
  assert 'tensorflow' not in sys.modules


@pytest.mark.parametrize('overrides,error,message', [
    (dict(data_dir='/nonexistent/tfds'), FileNotFoundError,
     "data_dir='/nonexistent/tfds' does not exist.*tfds build celeb_a"),
    (dict(dataset='celeb_z'), ValueError,
     "task.dataset='celeb_z' is not a TFDS dataset"),
    (dict(splits=dict(train='train', test='newtest')), ValueError,
     "split 'newtest' is not one of"),
    (dict(splits=dict(test='test')), ValueError, 'needs a "train" entry'),
    (dict(high_res=256, low_res=8), ValueError,
     r'center crop \(178x178\) cannot give task.high_res=256'),
    (dict(high_res=32, low_res=6), ValueError,
     'task.high_res=32 must be a multiple of task.low_res=6'),
])
def test_errors_before_any_work(tmp_path, mock_celeba, overrides, error,
                                message):
  config = celeba_config(prepared_data_dir(tmp_path))
  for field, value in overrides.items():  # Replaced, not merged.
    config[field] = value
  with pytest.raises(error, match=message):
    tasks.load_task(config, str(tmp_path / 'work'))
  assert not (tmp_path / 'work').exists()


def test_unprepared_dataset(tmp_path, mock_celeba):
  empty = tmp_path / 'empty'
  empty.mkdir()
  with pytest.raises(FileNotFoundError, match='not prepared in .*tfds build '
                     'celeb_a'):
    tasks.load_task(celeba_config(str(empty)), str(tmp_path / 'work'))


def test_an_empty_split_stops_before_any_work():
  empty = types.SimpleNamespace(
      as_data_source=lambda split: [],
      info=types.SimpleNamespace(full_name='celeb_a/2.1.0'))
  with pytest.raises(ValueError, match="split 'test' of celeb_a/2.1.0 has "
                     'no images'):
    tfds_images.ImageSource(empty, 'test')
