"""WMT14 through TFDS on mock data: from TFDS to sharded device batches.

`tfds.testing.mock_data` (policy USE_CODE) serves random examples with the
dataset's real features through `tfds.data_source`, without TensorFlow and
without a download. The data dir must exist and hold the prepared
dataset's directory, as `tfds build` leaves it.
"""

import types

import jax
import ml_collections
import numpy as np
import pytest
import tensorflow_datasets as tfds

from bpd_jax import tasks
from bpd_jax.infra import sharding
from bpd_jax.tasks import batching
from bpd_jax.tasks.text import tfds_translation
from bpd_jax.tasks.text import vocab as vocab_lib

DATASET = 'wmt14_translate/de-en'
EXAMPLES = 60  # Per split (the mock ignores the split's real size).


def prepared_data_dir(tmp_path):
  data_dir = tmp_path / 'tfds'
  (data_dir / DATASET / '1.0.0').mkdir(parents=True)
  return str(data_dir)


@pytest.fixture
def mock_wmt():
  with tfds.testing.mock_data(num_examples=EXAMPLES,
                              policy=tfds.testing.MockPolicy.USE_CODE):
    yield


def wmt_config(prepared_dir, **overrides):
  return ml_collections.ConfigDict({**dict(
      name='tfds_translation', dataset=DATASET, data_dir=prepared_dir,
      source_lang='en', target_lang='de',
      splits=dict(train='train', validation='validation', test='test'),
      vocab_size=48, vocab_sample=40, vocab_path='', max_source_len=32,
      max_target_len=32), **overrides})


def test_pipeline_from_tfds_to_sharded_device_batches(tmp_path, mock_wmt):
  workdir = tmp_path / 'work'
  task = tasks.load_task(wmt_config(prepared_data_dir(tmp_path)),
                         str(workdir))
  assert (workdir / 'vocab.model').exists()
  assert len(task.pairs('test')) == EXAMPLES
  source, target = task.pairs('test')[0]
  assert source and target and source != target

  whole = task.train_examples(0, 1)
  assert len(whole) == EXAMPLES
  ids, _ = whole[0]
  assert ids[-1] == vocab_lib.EOS_ID
  assert task.vocab.decode(ids) == ' '.join(task.pairs('train')[0][0].split())
  # Two processes: each reads its own half, cached in the workdir.
  halves = [task.train_examples(p, 2) for p in range(2)]
  assert [len(h) for h in halves] == [30, 30]
  np.testing.assert_array_equal(halves[1][0][1], whole[30][1])
  assert (workdir / 'data' / 'wmt14_translate_de-en.train.1-of-2.npz').exists()

  batches = batching.BucketedBatches(whole, (16, 32), 256, 32, 32, seed=0,
                                     pad_id=0, row_multiple=8)
  mesh = sharding.make_mesh((8,), ('data',))
  batch = sharding.global_batch(batches(0),
                                sharding.batch_sharding(mesh, 'data'))
  rows, length = batch['source'].shape
  assert rows % 8 == 0 and length in (16, 32) and rows == 256 // length // 8 * 8
  assert len(batch['target'].sharding.device_set) == 8
  assert jax.device_get(batch['target'])[:, 0].min() > vocab_lib.UNK_ID


def test_vocabulary_and_shards_are_reused_on_resume(tmp_path, mock_wmt):
  config, workdir = wmt_config(prepared_data_dir(tmp_path)), tmp_path / 'w'
  tasks.load_task(config, str(workdir)).train_examples(0, 1)
  files = [workdir / 'vocab.model',
           workdir / 'data' / 'wmt14_translate_de-en.train.0-of-1.npz']
  stamps = [f.stat().st_mtime_ns for f in files]
  task = tasks.load_task(config, str(workdir), train_vocab=False)
  assert len(task.train_examples(0, 1)) == EXAMPLES
  assert [f.stat().st_mtime_ns for f in files] == stamps


@pytest.mark.parametrize('overrides,error,message', [
    (dict(data_dir='/nonexistent/tfds'), FileNotFoundError,
     "data_dir='/nonexistent/tfds' does not exist.*tfds build "
     'wmt14_translate/de-en'),
    (dict(dataset='wmt99_translate/de-en'), ValueError,
     "task.dataset='wmt99_translate/de-en' is not a TFDS dataset"),
    (dict(dataset='wmt14_translate/xx-en'), ValueError,
     "task.dataset='wmt14_translate/xx-en' is not a TFDS dataset"),
    (dict(splits=dict(train='train', test='newstest2014')), ValueError,
     "split 'newstest2014' is not one of"),
    (dict(splits=dict(test='test')), ValueError, 'needs a "train" entry'),
    (dict(vocab_path='/nonexistent/vocab.model'), FileNotFoundError,
     'vocabulary /nonexistent/vocab.model not found'),
])
def test_errors_before_any_work(tmp_path, mock_wmt, overrides, error,
                                message):
  config = wmt_config(prepared_data_dir(tmp_path), **overrides)
  with pytest.raises(error, match=message):
    tasks.load_task(config, str(tmp_path / 'work'))
  assert not (tmp_path / 'work').exists()


def test_unprepared_dataset_and_missing_vocabulary(tmp_path, mock_wmt):
  empty = tmp_path / 'empty'
  empty.mkdir()
  with pytest.raises(FileNotFoundError, match='not prepared in .*tfds build'):
    tasks.load_task(wmt_config(str(empty)), str(tmp_path / 'work'))
  # Evaluation never trains a vocabulary: it must be in the workdir.
  with pytest.raises(FileNotFoundError, match='vocab.model not found'):
    tasks.load_task(wmt_config(prepared_data_dir(tmp_path)),
                    str(tmp_path / 'work'), train_vocab=False)


def test_an_empty_split_stops_before_any_work():
  empty = types.SimpleNamespace(
      as_data_source=lambda split: [],
      info=types.SimpleNamespace(full_name='wmt14_translate/de-en/1.0.0'))
  with pytest.raises(ValueError, match="split 'validation' of "
                     'wmt14_translate/de-en/1.0.0 has no examples'):
    tfds_translation.PairSource(empty, 'validation', 'en', 'de')
