"""configs/gpt2_heads.py: heads trained on a frozen pretrained GPT-2.

The committed tiny random GPT-2 (tests/data/tiny_gpt2, written by
scripts/make_tiny_gpt2.py with transformers) is the base: its weights come
in through `train.init_from`, stay frozen while the heads train on Python
code in GPT-2's tokens, and exact blockwise decoding gives greedy's output.
"""

import os
import shutil

import jax.numpy as jnp
import numpy as np
import pytest

from bpd_jax import config_checks
from bpd_jax import evaluation
from bpd_jax.infra import errors
from bpd_jax.infra import gpt2_ids
from bpd_jax.tasks.lm import python_source
from bpd_jax.training import train

from train_configs import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_GPT2 = os.path.join(ROOT, 'tests', 'data', 'tiny_gpt2')
CODE = 'def f(x):\n    return x + 1\n\n\nclass A:\n    pass\n'


def gpt2_config(arg):
  return load_config('gpt2_heads', arg)


@pytest.fixture
def code_root(tmp_path):
  wanted = {'train': 12, 'validation': 2, 'test': 1}  # Files a split.
  for i in range(1000):
    split = python_source.split_of(f'm{i}.py')
    if wanted[split]:
      wanted[split] -= 1
      (tmp_path / f'm{i}.py').write_text(CODE.replace('f(', f'f{i}('))
  return tmp_path


def test_heads_train_on_the_frozen_gpt2_and_decode_exactly(code_root,
                                                           tmp_path):
  config = gpt2_config(f'gpt2={TINY_GPT2},k=3,steps=4,root={code_root}')
  config.eval.num_examples = 4
  config_checks.check(config)
  workdir = str(tmp_path / 'run')
  lines = []
  model, task = train.train(config, workdir, log=lines.append)
  assert f'Warm start of the base from {TINY_GPT2}.' in lines
  # The base is GPT-2 still: transformers' logits, after the heads trained.
  with np.load(os.path.join(TINY_GPT2, 'expected_logits.npz')) as data:
    expected = dict(data)
  endoftext = 383
  logits = model.next_token_logits(model(None, jnp.asarray(
      gpt2_ids.from_gpt2(expected['input_ids'], endoftext))))
  columns = gpt2_ids.from_gpt2(np.arange(384), endoftext)
  np.testing.assert_allclose(np.asarray(logits)[..., columns],
                             expected['logits'], rtol=0, atol=1e-4)
  assert task.vocab.bos_id == model.config.bos_id == 1
  report = evaluation.report(config, workdir, model, task,
                             log=lambda _: None)
  # Greedy, k=2 (the eval ks up to k=3).
  assert [r['identical_to_greedy'] for r in report['rows']] == [1.0] * 2


def test_the_model_section_is_the_checkpoint_s(code_root, tmp_path):
  config = gpt2_config(f'gpt2={TINY_GPT2},k=3,steps=1,root={code_root}')
  assert (config.model.d_model, config.model.num_decoder_layers) == (32, 2)
  assert config.model.activation == 'gelu' and config.model.bos_id == 1
  config.model.d_ff = 64
  with pytest.raises(errors.ConfigError, match=r'another architecture .* '
                     r'd_ff=64 \(the checkpoint: 128\)'):
    train.train(config, str(tmp_path / 'run'), log=lambda _: None)


@pytest.mark.parametrize('arg,message', [
    ('k=4', 'needs gpt2=DIR'),
    (f'gpt2={TINY_GPT2},k=1', 'k=1 must be >= 2'),
    ('gpt2=/nonexistent', 'checkpoint directory /nonexistent not found'),
])
def test_bad_options(arg, message):
  with pytest.raises(Exception, match=message):
    gpt2_config(arg)


@pytest.mark.parametrize('config_json,error,message', [
    ('{"model_type": "llama", "vocab_size": 384}', errors.ConfigError,
     r"gpt2/config.json: model_type 'llama' is not GPT-2"),
    ('not json', errors.DataError,
     r'gpt2/config.json is not JSON \(line 1, column 1: Expecting value\)'),
])
def test_a_folder_of_another_model_names_its_config_json(
    tmp_path, config_json, error, message):
  folder = tmp_path / 'gpt2'
  shutil.copytree(TINY_GPT2, folder)
  (folder / 'config.json').write_text(config_json)
  with pytest.raises(error, match=message) as raised:
    gpt2_config(f'gpt2={folder}')
  assert '\n' not in str(raised.value)
