"""The translation report: decoders compared on an eval split."""

import pytest
from flax import nnx

from bpd_jax import evaluation
from bpd_jax import tasks
from bpd_jax.evaluation import spec
from bpd_jax.evaluation import text
from bpd_jax.evaluation.spec import DecoderSpec
from bpd_jax.models import factory
from bpd_jax.models import Transformer
from bpd_jax.tasks.text import vocab as vocab_lib

from train_configs import tiny_config


def setup():
  config = tiny_config()
  task = tasks.load_task(config.task, '/nonexistent')
  model = Transformer(
      factory.model_config_from(config, task.vocab.vocab_size),
      rngs=nnx.Rngs(0))
  return config, model, task


def test_rows_for_every_decoder_and_exact_equals_greedy():
  config, model, task = setup()
  config.eval.max_len = 10
  decoders = spec.decoders_from_config(config.eval)
  assert [d.name for d in decoders] == ['greedy', 'blockwise k=2',
                                        'blockwise k=3']
  report = text.evaluate(model, task, 'validation', decoders,
                         batch_size=3, log=lambda _: None)
  assert report['examples'] == 8 and report['truncated_sources'] == 0
  assert report['bleu_signature'].startswith('nrefs:1')
  rows = report['rows']
  assert [r['decoder'] for r in rows] == [d.name for d in decoders]
  for row in rows:
    assert row['identical_to_greedy'] == 1.0
    assert row['bleu'] == rows[0]['bleu']
    assert row['mean_block'] >= 1.0
  assert rows[0]['speedup'] == 1.0


def test_greedy_comes_first():
  config, model, task = setup()
  with pytest.raises(ValueError, match='the first decoder must be greedy'):
    text.evaluate(model, task, 'validation', [DecoderSpec.of(5, 2)],
                  batch_size=2)


def test_bleu():
  score, signature = text.bleu(['a small cat .'], ['a small cat .'])
  assert score == pytest.approx(100.0) and 'tok:13a' in signature
  assert DecoderSpec.of(8, 4, 'top-k:2', 2).name == (
      'blockwise k=4 top-k:2 l=2')


def test_word_vocabulary_text_is_scored_without_the_tokenized_warning(caplog):
  # sacreBLEU warns (on the console) when 100 lines end in ' .'; a word
  # vocabulary's text is tokens joined by spaces by construction.
  lines = ['a small cat .'] * 100
  assert vocab_lib.WordVocabulary(['a']).tokenized_text
  with caplog.at_level('WARNING'):
    text.bleu(lines, lines)
  assert 'detokenize' in caplog.text
  caplog.clear()
  with caplog.at_level('WARNING'):
    score, _ = text.bleu(lines, lines, tokenized_text=True)
  assert score == pytest.approx(100.0) and 'detokenize' not in caplog.text


def test_tokenized_bleu_splits_punctuation_as_t2t_bleu():
  # 'intl' splits the Unicode punctuation that 13a keeps attached, such as
  # German quotation marks.
  hypothesis, reference = ['er sagt „ja“ .'], ['er sagt „ ja “ .']
  intl, signature = text.bleu(hypothesis, reference, 'intl')
  plain, _ = text.bleu(hypothesis, reference)
  assert 'tok:intl' in signature
  assert intl == pytest.approx(100.0) and plain < 100.0


def test_sampled_rows_are_timed_against_ancestral_sampling():
  config, model, task = setup()
  config.eval.ks = (3,)
  config.eval.criteria = ('exact', 'top-k:2', 'typical:0.3,0.09')
  config.eval.samplers = ('temperature=0.8',)
  config.eval.max_len = 8
  decoders = spec.decoders_from_config(config.eval)
  # Top-k verification is argmax-only: no sampled row takes it.
  assert [d.name for d in decoders] == [
      'greedy', 'blockwise k=3', 'blockwise k=3 top-k:2',
      'blockwise k=3 typical:0.3,0.09', 'ancestral temperature=0.8',
      'blockwise k=3 temperature=0.8',
      'blockwise k=3 typical:0.3,0.09 temperature=0.8']
  # Decoded: greedy (the first), ancestral and blockwise sampling.
  decoders = [decoders[0], decoders[4], decoders[5]]
  report = text.evaluate(model, task, 'validation', decoders,
                         batch_size=4, log=lambda _: None)
  rows = {r['decoder']: r for r in report['rows']}
  ancestral = rows['ancestral temperature=0.8']
  assert ancestral['speedup'] == 1.0 and ancestral['sampler'] == (
      'temperature=0.8')
  assert ancestral['identical_to_greedy'] is None
  assert rows['blockwise k=3 temperature=0.8']['mean_block'] >= 1.0
  assert rows['greedy']['sampler'] is None


def test_a_full_disk_keeps_the_previous_report(tmp_path):
  # The report used to be written in place: a full disk left invalid JSON.
  from bpd_jax.infra import errors
  from test_infra_atomic_files import disk_full_past
  config, model, task = setup()
  config.eval.update(ks=(2,), num_examples=2)
  evaluation.report(config, str(tmp_path), model, task, log=lambda _: None)
  path = tmp_path / 'eval_validation.json'
  previous = path.read_bytes()
  with disk_full_past(len(previous) // 2), pytest.raises(
      errors.WriteError, match=f'^writing {path} failed: File too large '
      r'\(errno 27\); the previous file is intact\.$'):
    evaluation.report(config, str(tmp_path), model, task, log=lambda _: None)
  assert path.read_bytes() == previous
  assert [p.name for p in tmp_path.iterdir()] == ['eval_validation.json']


def test_the_header_counts_the_sentences_decoded():
  _, model, task = setup()
  lines = []
  report = text.evaluate(model, task, 'validation', [DecoderSpec.of(4)],
                         batch_size=4, num_examples=100, log=lines.append)
  assert report['examples'] == 8  # The split has 8, not the 100 asked.
  assert lines[0] == 'Decoding validation (8 sentences) with 1 decoders:'
