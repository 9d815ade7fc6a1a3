"""The draft job's first step: the corpus and the rescorers built on it."""

import ml_collections
import pytest

from bpd_jax.drafts import rescorer_training
from bpd_jax.models import TransformerConfig
from bpd_jax.rescorers import ngram
from bpd_jax.tasks.text import task as text_task
from bpd_jax.tasks.text import vocab as vocab_lib

WORDS = ['a', 'b', 'c']
EOS = 1


def task():
  return text_task.TextTask(vocab_lib.WordVocabulary(WORDS), {
      'train': [('x', 'a b'), ('x', 'b c'), ('x', 'c')],
      'validation': [('x', 'a c')]})


def drafts(**fields):
  return ml_collections.ConfigDict(dict(dict(corpus='targets',
                                             corpus_limit=0), **fields))


def test_the_corpus_is_the_targets_or_a_file_eos_ended(tmp_path):
  a, b, c = (4 + WORDS.index(w) for w in WORDS)
  assert rescorer_training.corpus(drafts(), task(), EOS) == [
      [a, b, EOS], [b, c, EOS], [c, EOS]]
  assert rescorer_training.corpus(drafts(corpus_limit=1), task(), EOS) == [
      [a, b, EOS]]
  path = tmp_path / 'distilled.tgt'
  path.write_text('c c\nb\n')
  assert rescorer_training.corpus(drafts(corpus=str(path)), task(), EOS) == [
      [c, c, EOS], [b, EOS]]
  with pytest.raises(ValueError, match='no such file'):
    rescorer_training.corpus(drafts(corpus=str(tmp_path / 'no')), task(), EOS)


def test_only_the_rescorers_needed_are_built_and_saved(tmp_path):
  config = ml_collections.ConfigDict(dict(drafts=drafts(ngram_order=2)))
  model_config = TransformerConfig(vocab_size=7, d_model=8, d_ff=8,
                                   num_heads=1)
  text = rescorer_training.corpus(config.drafts, task(), EOS)
  rescorers, figures = rescorer_training.build(
      config, task(), model_config, text, {'ngram', 'none'}, str(tmp_path),
      log=lambda _: None)
  assert list(rescorers) == ['ngram'] and list(figures) == ['ngram']
  assert figures['ngram']['sentences'] == 3
  saved = ngram.NgramModel.load(str(tmp_path / rescorer_training.NGRAM_FILE))
  assert saved.order == 2
  assert not (tmp_path / rescorer_training.LM_DIR).exists()
