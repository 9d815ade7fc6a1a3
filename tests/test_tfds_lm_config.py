"""configs/tfds_lm.py: Kim et al.'s tasks, each run end to end on mock data.

The `runlocal` option trains a tiny decoder-only model on TFDS mock data
(no data dir) for a few steps, then reports perplexity and decodes: the
whole path (TFDS, prompt formats, vocabulary, training, checkpoints, the
language-model report) for each dataset.
"""

import json
import os

import pytest

from bpd_jax import config_checks
from bpd_jax import evaluation
from bpd_jax.training import train

from train_configs import load_config


def tfds_lm_config(arg=None):
  return load_config('tfds_lm', arg)


def test_full_scale_defaults_pass_the_checks():
  for dataset in ('lm1b', 'cnn_dailymail', 'xsum', 'squad'):
    config = tfds_lm_config(f'dataset={dataset}')
    config_checks.check(config)
    assert config.model.num_encoder_layers == 0
    assert config.train.freeze_base and config.train.base_steps > 0
  assert tfds_lm_config('dataset=squad').task.dataset == 'squad/v1.1'
  assert tfds_lm_config().task.splits.validation == 'test'  # LM1B's.


@pytest.mark.parametrize('arg,message', [
    ('dataset=wiki', "dataset='wiki' is not one of"),
    ('heads=many', "heads='many' is not one of"),
])
def test_bad_options(arg, message):
  with pytest.raises(ValueError, match=message):
    tfds_lm_config(arg)


# XSum takes CNN/DailyMail's path (a document, "Summary:"): slow only.
@pytest.mark.parametrize('dataset', [
    # lm1b by default: its job reads sentences, not documents; the others'
    # readers (documents and their fields) slow.
    pytest.param('squad', marks=pytest.mark.slow),
    pytest.param('cnn_dailymail', marks=pytest.mark.slow),
    pytest.param('xsum', marks=pytest.mark.slow), 'lm1b'])
def test_runlocal_trains_and_reports(dataset, tmp_path):
  config = tfds_lm_config(f'runlocal,dataset={dataset}')
  config_checks.check(config)
  model, task = train.train(config, str(tmp_path), log=lambda _: None)
  report = evaluation.report(config, str(tmp_path), model, task,
                             log=lambda _: None)
  saved = json.loads((tmp_path / 'eval_validation.json').read_text())
  assert saved['perplexity'] == report['perplexity'] > 1
  assert report['examples'] == 4
  assert [r['decoder'] for r in report['rows']] == ['greedy', 'blockwise k=3']
  assert report['rows'][1]['identical_to_greedy'] == 1.0
  assert os.path.exists(tmp_path / 'vocab.model')
