"""LM tasks' examples: prompts, references, decoder inputs, shards, checks."""

import ml_collections
import pytest

from bpd_jax.infra import token_ids
from bpd_jax.tasks import batching
from bpd_jax.tasks.lm import task as task_lib
from bpd_jax.tasks.text import vocab as vocab_lib

EOS, BOS = token_ids.EOS_ID, token_ids.BOS_ID


def lm_task(examples, eval_prompt_len=2):
  vocab = vocab_lib.WordVocabulary(['a', 'b', 'c', 'd', 'e', 'f'])
  pairs = batching.EncodedPairs.from_pairs(examples)
  return task_lib.LMTask(vocab, {'train': pairs, 'validation': pairs},
                         eval_prompt_len=eval_prompt_len, train_prompt_len=0)


def test_chunked_cuts_each_document_and_drops_short_pieces():
  pairs = task_lib.chunked([[4, 5, 6, 7, 8, EOS], [9, EOS], [4]], length=4)
  assert [(list(p), list(c)) for p, c in pairs] == [
      ([], [4, 5, 6, 7]), ([], [8, EOS]), ([], [9, EOS])]
  with pytest.raises(ValueError, match='length=0'):
    task_lib.chunked([[4]], 0)


def test_eval_prompts_come_from_the_prompt_or_the_first_tokens():
  task = lm_task([([], [4, 5, 6, 7, EOS]),   # Prompt-less: first 2 tokens.
                  ([], [4, 5]),               # Nothing after them: skipped.
                  ([8, 9], [6, EOS])])        # Its own prompt.
  ids = [(list(p), list(c)) for p, c in task.eval_ids('validation')]
  assert ids == [([4, 5], [6, 7]), ([8, 9], [6])]
  assert task.pairs('validation') == [('a b', 'c d'), ('e f', 'c')]
  first = task.eval_ids('validation', limit=1)
  assert len(first) == 1 and list(first[0][1]) == [6, 7]


def test_a_split_with_nothing_to_evaluate_is_found_lazily():
  read = []

  def examples(pairs):
    for pair in pairs:  # Records how far the check reads.
      read.append(pair)
      yield pair
  # Prompt-less examples of 2 tokens: nothing after a 2-token prompt.
  assert not task_lib.has_eval_example(examples([([], [4, EOS])] * 3), 2,
                                       eos_id=EOS)
  assert len(read) == 3
  read.clear()
  assert task_lib.has_eval_example(
      examples([([], [4, 5, EOS]), ([], [4, EOS])]), 2, eos_id=EOS)
  assert len(read) == 1  # It stops at the first that evaluation can use.
  assert task_lib.has_eval_example([([8], [EOS])], 2,
                                   eos_id=EOS)  # Its own prompt.


def test_sources_start_with_bos_and_long_prompts_keep_their_end():
  task = lm_task([([4, 5, 6, 7], [8, EOS]), ([4], [5, EOS])])
  sources, cut = task.sources('validation', max_len=3)
  assert sources == [[BOS, 6, 7], [BOS, 4]] and cut == 1
  with pytest.raises(ValueError, match='max_len=1'):
    task.sources('validation', max_len=1)
  with pytest.raises(ValueError, match="split 'test'"):
    task.encoded('test')


def test_train_examples_are_contiguous_shards():
  task = lm_task([([], [4 + i, EOS]) for i in range(5)])
  shards = [task.train_examples(i, 2) for i in range(2)]
  firsts = [[int(c[0]) for _, c in shard] for shard in shards]
  assert firsts == [[4, 5], [6, 7, 8]]
  assert isinstance(shards[0], batching.EncodedPairs)


def config(**model):
  return ml_collections.ConfigDict(dict(
      task=dict(name='python_source', max_source_len=8, max_target_len=32),
      model=dict(dict(num_encoder_layers=0, max_source_len=9,
                      max_target_len=40), **model),
      eval=dict(max_len=24, ks=(2, 8))))


def test_check_model_accepts_a_model_that_fits():
  task_lib.check_model(config(), train_prompt_len=0)


@pytest.mark.parametrize('model,prompt,message', [
    (dict(max_source_len=8), 0, 'model.max_source_len=8 must hold'),
    (dict(max_target_len=39), 0, r'decode .*: 40\)'),
    (dict(), 9, r'training sequence \(41 positions\)'),
])
def test_check_model_names_the_field(model, prompt, message):
  with pytest.raises(ValueError, match=message):
    task_lib.check_model(config(**model), train_prompt_len=prompt)


def test_an_encoder_is_refused_with_its_depth():
  task_lib.check_decoder_only('python_source', 0)
  with pytest.raises(ValueError, match=r"task.name='python_source' trains a "
                     r'decoder-only model: set model.num_encoder_layers=0 '
                     r'\(it is 2\)'):
    task_lib.check_decoder_only('python_source', 2)


def test_check_config_checks_what_every_lm_task_shares():
  fits = config()
  fits.eval.split = 'validation'
  fits.task.max_target_len = 33
  task_lib.check_config(fits, ('train', 'validation'), train_prompts=False,
                        continued=True)
  # Training prompts lengthen a training sequence past the model's 40.
  with pytest.raises(ValueError, match=r'training sequence \(41 positions'):
    task_lib.check_config(fits, ('train', 'validation'), train_prompts=True,
                          continued=True)
  with pytest.raises(ValueError, match="eval.split='validation'"):
    task_lib.check_config(fits, ('train', 'test'), train_prompts=False,
                          continued=True)
  # A prompt as long as an example leaves no continuation to compare
  # with, unless evaluation has references of its own.
  fits.task.max_source_len = fits.task.max_target_len = 16
  fits.model.update(max_source_len=17, max_target_len=48)
  with pytest.raises(ValueError, match=r'max_source_len=16 \(the evaluation '
                     r'prompt\) must be below task.max_target_len=16'):
    task_lib.check_config(fits, ('train', 'validation'), train_prompts=False,
                          continued=True)
  task_lib.check_config(fits, ('train', 'validation'), train_prompts=False,
                        continued=False)
