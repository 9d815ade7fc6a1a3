"""The task's report: one per kind, chosen by the kind its task declares."""

import inspect

import ml_collections
import pytest

from bpd_jax import draft_vocab as draft_vocab_lib
from bpd_jax import evaluation
from bpd_jax.evaluation import image
from bpd_jax.evaluation import reports
from bpd_jax.evaluation.spec import DecoderSpec
from bpd_jax.infra import errors
from bpd_jax.models import TransformerConfig
from bpd_jax.rescorers import ngram
from bpd_jax.tasks import spec as task_spec

import test_evaluation_image
import test_evaluation_lm
import train_configs


def test_every_kind_has_a_report_with_the_reports_members():
  assert sorted(reports.REPORTS) == sorted(task_spec.KINDS)
  members = {name for name, _ in inspect.getmembers(reports.Report)
             if not name.startswith('_')}
  assert members == {'evaluate', 'write', 'training_figures'}
  for kind, module in reports.REPORTS.items():
    for name in members:
      expected = inspect.signature(getattr(reports.Report, name))
      actual = inspect.signature(getattr(module, name))
      # The protocol's methods take self; a module's functions do not. A
      # kind's own arguments come after the protocol's, with defaults.
      shared = list(expected.parameters)[1:]
      assert list(actual.parameters)[:len(shared)] == shared, (kind, name)
      assert all(actual.parameters[extra].default is not inspect.Parameter.empty
                 for extra in list(actual.parameters)[len(shared):]), (
                     kind, name)


def test_periodic_evaluation_of_an_image_task_reads_greedys_row():
  """An image report's first row is bicubic's: the figures must be the
  greedy decoder's and the mean block the blockwise one's."""
  config = train_configs.load_config('sr_demo', 'quick')
  config.eval.update(periodic_examples=3, batch_size=3, max_len=4 * 4 * 3)
  config.mesh.shape = (1,)
  model = test_evaluation_image.tiny_image_model()
  task = test_evaluation_image.tiny_image_task()
  values = evaluation.periodic(config)(model, task, step=10)
  pixels = 4 * 4 * 3
  rows = image.evaluate(model, task, 'validation',
                        [DecoderSpec.of(pixels), DecoderSpec.of(pixels, 4)],
                        batch_size=3, num_examples=3,
                        log=lambda _: None)['rows']
  assert [row['decoder'] for row in rows] == ['bicubic', 'greedy',
                                              'blockwise k=4']
  assert values == {'eval/psnr': rows[1]['psnr'],
                    'eval/ssim': rows[1]['ssim'],
                    'eval/mean_block': rows[2]['mean_block']}


def tiny_run(**eval_fields):
  """(config, task, model): the tiny config's task and a random model,
  decoding 2 examples at k=2 with these further eval fields."""
  from bpd_jax import tasks
  from bpd_jax.models import factory
  config = train_configs.tiny_config()
  config.eval.update(ks=(2,), num_examples=2, **eval_fields)
  task = tasks.load_task(config.task, '/nonexistent')
  return config, task, factory.random_model(config, task.vocab.vocab_size)


def test_the_report_times_eval_repeats_rounds_and_reports_the_median(
    monkeypatch, tmp_path):
  # One pass per decoder moved the main job's speedups by a third from run
  # to run; the report times as the bench does.
  from bpd_jax.evaluation import runner
  config, task, model = tiny_run(repeats=3)
  measured = []
  real_run = runner.run

  def spy(*args, **kwargs):
    measured.extend(real_run(*args, **kwargs))
    return measured
  monkeypatch.setattr(runner, 'run', spy)
  result = evaluation.report(config, str(tmp_path), model, task,
                             log=lambda _: None)
  assert [len(m.walls) for m in measured] == [3, 3]
  assert [row['wall_s'] for row in result['rows']] == [
      round(sorted(m.walls)[1], 3) for m in measured]


def test_the_report_drafts_among_eval_draft_vocab_size_ids(monkeypatch,
                                                           tmp_path):
  from bpd_jax import generate
  config, task, model = tiny_run(repeats=1, draft_vocab_size=5)
  decoders = []
  real_decoder = generate.Decoder

  def spy(*args, **kwargs):
    decoders.append(real_decoder(*args, **kwargs))
    return decoders[-1]
  monkeypatch.setattr(generate, 'Decoder', spy)
  lines = []
  result = evaluation.report(config, str(tmp_path), model, task,
                             log=lines.append)
  counted = [target for _, target in task.encoded('train')]
  expected = draft_vocab_lib.most_frequent(
      counted, vocab_size=task.vocab.vocab_size, size=5)
  assert [list(d.draft_vocab) for d in decoders] == [list(expected)]
  assert 'among the 5 most frequent ids' in ' '.join(lines)
  assert [row['identical_to_greedy'] for row in result['rows']] == [1.0, 1.0]


def test_a_language_models_report_scores_eval_perplexity_tokens(tmp_path):
  config = train_configs.load_config('lm_demo', 'quick')
  config.eval.update(num_examples=2, ks=(2,), max_len=4, repeats=1,
                     perplexity_tokens=10)
  config.mesh.shape = (1,)
  model, task, _ = test_evaluation_lm.setup()
  lines = []
  result = evaluation.report(config, str(tmp_path), model, task,
                             log=lines.append)
  assert result['scored_tokens'] == 10 and result['perplexity_cut']
  assert '  perplexity on validation: ' in lines[1]
  assert lines[1].endswith(' (10 tokens, cut there by eval.perplexity_tokens)')
  assert (f'perplexity {result["perplexity"]} over the first 10 tokens '
          f'(eval.perplexity_tokens). Report: ') in lines[-1]


def test_an_ngram_model_of_another_vocabulary_is_refused_naming_it(tmp_path):
  path = str(tmp_path / 'ngram.npz')
  ngram.build([[5, 6, 7]], order=2, vocab_size=50, bos_id=2,
              eos_id=1).save(path)
  ev = ml_collections.ConfigDict(dict(ngram_path=path))
  assert reports._rescorers(ev, 50)['ngram'].vocab_size == 50
  with pytest.raises(errors.DataError, match=rf'^eval.ngram_path={path}: an '
                     r'n-gram model of a vocabulary of 50 ids, the model '
                     r'decodes 473'):
    reports._rescorers(ev, 473)
  ev.drafters = ('ngram:max=3,min=3',)
  with pytest.raises(errors.ConfigError, match=r"^eval.drafters with eval."
                     r"ngram_path: drafter 'ngram:min=3': min=3 asks "
                     r'for contexts of 2 tokens, but the n-gram model of '
                     r'order 2 finds 1 at most: min <= 2\.$'):
    reports._rescorers(ev, 50)


def test_a_row_the_vocabulary_refuses_is_named_before_any_decoding():
  # eval.trees, eval.samplers and eval.criteria are checked against a
  # vocabulary of 2**31 with the config; the model's is known later.
  model_config = TransformerConfig.from_size('tiny', vocab_size=100,
                                             num_proposal_heads=4)
  fine = DecoderSpec.of(16, 4, tree='dynamic:8,top=8')
  reports._check_with_the_vocabulary([fine], model_config)
  wide = DecoderSpec.of(16, 4, tree='dynamic:8,top=1000')
  with pytest.raises(errors.ConfigError, match=r"^config.eval: the row "
                     r"'blockwise k=4 tree=dynamic:8,top=1000': the tree reads "
                     r'the top 1000 tokens of a vocabulary of 100\.$'):
    reports._check_with_the_vocabulary([fine, wide], model_config)
