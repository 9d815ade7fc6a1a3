"""TFDS prompt -> continuation tasks on mock data: formats, cuts, errors."""

import ml_collections
import numpy as np
import pytest

from bpd_jax import tasks
from bpd_jax.infra import errors
from bpd_jax.tasks.lm import tfds_lm
from bpd_jax.tasks.text import vocab as vocab_lib


def section(dataset, **fields):
  return ml_collections.ConfigDict(dict(dict(
      name='tfds_lm', dataset=dataset, data_dir='/nonexistent',
      splits=dict(train='train', validation='validation'), max_source_len=12,
      max_target_len=6, train_limit=0, vocab_size=64, vocab_sample=0,
      vocab_path='', mock_examples=8), **fields))


def test_formats_turn_features_into_prompt_and_continuation():
  assert tfds_lm.format_of('squad/v1.1') is tfds_lm.FORMATS['squad']
  example = dict(context=b'Paris is in France.', question=b'Where?',
                 answers={'text': np.array([b'France', b'in France']),
                          'answer_start': np.array([12, 9])})
  form = tfds_lm.FORMATS['squad']
  text = {name: tfds_lm._text(value) for name, value in example.items()}
  assert form.prompt.format(**text) == ('Paris is in France.\nQuestion: '
                                        'Where?\nAnswer:')
  assert form.continuation.format(**text) == ' France'
  with pytest.raises(ValueError, match="no prompt -> continuation format "
                     "for 'wiki'"):
    tfds_lm.format_of('wiki/en')


def test_prompts_keep_their_end_and_continuations_their_start():
  vocab = vocab_lib.WordVocabulary([str(i) for i in range(30)])
  texts = [(' '.join(map(str, range(20))), '0 1 2 3 4 5 6 7'), ('5', '6')]
  pairs = tfds_lm.encode(texts, vocab, True, max_source_len=3,
                         max_target_len=4)
  words = lambda ids: vocab.decode(list(ids))
  assert [(words(p), words(c)) for p, c in pairs] == [
      ('17 18 19', '0 1 2 3'), ('5', '6')]
  assert int(pairs[1][1][-1]) == 1  # Eos ends a continuation that fits.
  plain = tfds_lm.encode([('', '0 1 2 3 4')], vocab, False, 3, 4)
  assert [list(map(int, c)) for _, c in plain] == [[4, 5, 6, 7], [8, 1]]


@pytest.mark.parametrize('dataset,prompted', [('squad/v1.1', True),
                                              ('lm1b', False)])
def test_mock_data_loads_as_an_lm_task(dataset, prompted, tmp_path):
  # Mock texts are a few words: an LM's evaluation prompt of 2 tokens.
  prompt = 12 if prompted else 2
  task = tasks.load_task(section(dataset, max_source_len=prompt),
                         str(tmp_path))
  assert task.train_prompt_len == (12 if prompted else 0)
  prompts, continuations = task.encoded('train').lengths()
  assert (prompts > 0).all() == prompted and continuations.max() <= 6
  sources, _ = task.sources('validation', max_len=13)
  assert sources and all(s[0] == 2 and len(s) <= 13 for s in sources)


def test_bad_sections_are_named(tmp_path):
  with pytest.raises(Exception, match="task.dataset='' must be a TFDS name"):
    tasks.load_task(section(''), str(tmp_path))
  with pytest.raises(Exception, match='needs a "train" entry'):
    tasks.load_task(section('lm1b', splits=dict(validation='test')),
                    str(tmp_path))
  with pytest.raises(Exception, match="task.data_dir='/nonexistent' does "
                     "not exist"):
    tasks.load_task(section('lm1b', mock_examples=0), str(tmp_path))


def test_a_split_with_nothing_to_evaluate_stops_the_load(tmp_path):
  """Mock texts are shorter than a 40-token prompt: no reference follows
  (it used to stop the job after training)."""
  with pytest.raises(errors.DataError, match=r"split 'validation' of "
                     r'lm1b/.* \(task.splits.validation\) has nothing to '
                     r'evaluate: none of its 8 example\(s\) is longer than '
                     r'task.max_source_len=40 tokens'):
    tasks.load_task(section('lm1b', max_source_len=40, max_target_len=60),
                    str(tmp_path))


class Texts:
  """An ExampleSource's (prompt, continuation) texts, in memory."""
  name = "split 'train' of lm1b/1.1.0"

  def __init__(self, texts):
    self._texts = texts

  def __len__(self):
    return len(self._texts)

  def __getitem__(self, index):
    return self._texts[index]


def test_training_text_is_checked_before_the_vocabulary_is_trained():
  empty = Texts([('', '')] * 3 + [('', 'a')])
  tfds_lm.check_training_text(empty, prompted=False, limit=0)
  with pytest.raises(ValueError, match=r"split 'train' of lm1b/1.1.0 "
                     r'\(task.splits.train\) has nothing to train on: the '
                     r'text of its 3 example\(s\) is empty'):
    tfds_lm.check_training_text(empty, prompted=False, limit=3)
  tfds_lm.check_training_text(empty, prompted=True, limit=3)  # The cue.


def test_config_checks():
  config = ml_collections.ConfigDict(dict(
      task=section('lm1b', max_source_len=12, max_target_len=12),
      model=dict(num_encoder_layers=0, max_source_len=13, max_target_len=40),
      eval=dict(max_len=8, ks=(2,), split='validation')))
  with pytest.raises(ValueError, match=r'max_source_len=12 \(the evaluation '
                     r'prompt\) must be below task.max_target_len=12'):
    tasks.check(config)
  config.task.max_target_len = 16
  tasks.check(config)
  config.eval.split = 'test'
  with pytest.raises(ValueError, match=r"eval.split='test' is not a split of "
                     r"task 'tfds_lm': one of \['train', 'validation'\]"):
    tasks.check(config)
