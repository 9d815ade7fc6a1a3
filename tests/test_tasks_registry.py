"""The task registry: names, kinds, checks, and loading through it."""

import ml_collections
import numpy as np
import pytest

from bpd_jax.tasks import batching
from bpd_jax.tasks.images import tokens as image_tokens
from bpd_jax import tasks
from bpd_jax.tasks.text import vocab as vocab_lib


def test_embedded_task():
  config = ml_collections.ConfigDict(dict(
      name='embedded', sizes=dict(train=50, validation=5)))
  task = tasks.load_task(config, '/nonexistent')
  assert len(task.pairs('train')) == 50 and len(task.pairs('validation')) == 5
  source, target = task.encoded('train')[0]
  assert source[-1] == target[-1] == vocab_lib.EOS_ID
  assert vocab_lib.UNK_ID not in source + target
  with pytest.raises(ValueError, match="split 'test' is not one of"):
    task.pairs('test')


def parallel_config(tmp_path, **overrides):
  for split in ('train', 'val'):
    (tmp_path / f'{split}.en').write_text(
        ''.join(f'a dog number {i} .\n' for i in range(40)))
    (tmp_path / f'{split}.de').write_text(
        ''.join(f'ein hund nummer {i} .\n' for i in range(40)))
  return ml_collections.ConfigDict({**dict(
      name='parallel_text', data_dir=str(tmp_path), source_lang='en',
      target_lang='de', splits=dict(train='train', validation='val'),
      train_limit=0, vocab_type='sentencepiece', vocab_size=40), **overrides})


def test_parallel_text_with_sentencepiece_saved_in_workdir(tmp_path):
  workdir = tmp_path / 'work'
  task = tasks.load_task(parallel_config(tmp_path), str(workdir))
  assert (workdir / 'vocab.model').exists()
  assert len(task.pairs('validation')) == 40
  source, _ = task.encoded('train')[3]
  assert task.vocab.decode(source) == 'a dog number 3 .'
  # Reused on resume, not retrained.
  mtime = (workdir / 'vocab.model').stat().st_mtime_ns
  tasks.load_task(parallel_config(tmp_path), str(workdir))
  assert (workdir / 'vocab.model').stat().st_mtime_ns == mtime


def test_parallel_text_with_words_and_limit(tmp_path):
  task = tasks.load_task(parallel_config(tmp_path, vocab_type='words',
                                         train_limit=10), str(tmp_path))
  assert len(task.pairs('train')) == 10
  assert isinstance(task.vocab, vocab_lib.WordVocabulary)


@pytest.mark.parametrize('overrides,message', [
    (dict(name='wmt'), "task.name='wmt' is not one of"),
    (dict(vocab_type='bpe'), "task.vocab_type='bpe' is not one of"),
    (dict(splits=dict(validation='val')), 'needs a "train" entry'),
    (dict(data_dir='/nonexistent'), 'train.en not found'),
])
def test_errors(tmp_path, overrides, message):
  with pytest.raises((ValueError, FileNotFoundError), match=message):
    tasks.load_task(parallel_config(tmp_path, **overrides), str(tmp_path))


def test_parallel_text_vocab_sample_shards_and_missing_vocabulary(tmp_path):
  config = parallel_config(tmp_path, vocab_sample=10)
  with pytest.raises(FileNotFoundError, match='vocab.model not found'):
    tasks.load_task(config, str(tmp_path / 'work'), train_vocab=False)
  task = tasks.load_task(config, str(tmp_path / 'work'))
  shards = [task.train_examples(p, 3) for p in range(3)]
  assert [len(s) for s in shards] == [14, 13, 13]
  encoded = task.encoded('train')
  assert [list(x) for x in shards[1][2]] == [list(x) for x in encoded[7]]
  # Another run reuses this vocabulary through task.vocab_path.
  other = tasks.load_task(parallel_config(
      tmp_path, vocab_path=str(tmp_path / 'work' / 'vocab.model')),
      str(tmp_path / 'other'))
  assert other.vocab.vocab_size == task.vocab.vocab_size
  assert not (tmp_path / 'other').exists()


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
  data = batching.TrainBatches(encoded, 8, 48, 768, seed=0)
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


@pytest.mark.parametrize('overrides,message', [
    (dict(high_res=16, low_res=5), 'task.high_res=16 must be a multiple of '
     'task.low_res=5'),
    (dict(sizes=dict(train=4, dev=2)), r"task.sizes has splits \['dev'\]"),
])
def test_image_task_errors(overrides, message):
  with pytest.raises(ValueError, match=message):
    tasks.load_task(image_config(**overrides), '/nonexistent')


def test_every_task_is_registered_with_its_kind():
  kinds = {name: tasks.get(name).kind for name in tasks.NAMES}
  assert kinds == {'embedded': 'text', 'parallel_text': 'text',
                   'tfds_translation': 'text', 'embedded_images': 'image',
                   'tfds_images': 'image'}
  with pytest.raises(ValueError, match=r"task.name='wmt' is not one of "
                     r"\('embedded', 'parallel_text'"):
    tasks.get('wmt')


def job_config(name):
  return ml_collections.ConfigDict(dict(task=dict(name=name)))


@pytest.mark.parametrize('job,message', [
    ('bench', "the bench times translation tasks; task.name="
     "'embedded_images' is an image task: python -m bpd_jax.evaluate"),
    ('drafts', "the draft job analyses text tasks; task.name="
     "'embedded_images' is an image task."),
    ('distill', "distillation writes parallel text; task.name="
     "'embedded_images' is an image task."),
])
def test_require_kind_names_the_job(job, message):
  tasks.require_kind(job_config('embedded'), 'text', job=job)
  with pytest.raises(ValueError) as error:
    tasks.require_kind(job_config('embedded_images'), 'text', job=job)
  assert str(error.value).startswith(message)


def test_check_runs_the_task_own_checks():
  config = ml_collections.ConfigDict(dict(
      task=dict(image_config(), high_res=16, low_res=5),
      eval=dict(max_len=768, grid_examples=2), train=dict()))
  with pytest.raises(ValueError, match='task.high_res=16 must be a multiple'):
    tasks.check(config)
  config.task.low_res = 4
  tasks.check(config)
  config.task.max_target_len = 1
  with pytest.raises(ValueError, match='task.max_target_len=1 must be an '
                     'integer >= 2'):
    tasks.check(config)

