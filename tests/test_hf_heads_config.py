"""configs/hf_heads.py: heads trained on a frozen imported model.

The committed tiny random checkpoints (tests/data/tiny_llama3: bf16, GQA,
llama3 rope scaling, three end ids, no pad; tiny_gpt2) are the base: their
weights come in through `train.init_from`, stay bit-identical while the
heads train on text in the checkpoint's own token ids, and exact blockwise
decoding gives greedy's output. Prompts of a JSONL file are continued by
the imported base itself (the distill job's model where the run has no
checkpoint), then the heads train on those continuations.
"""

import json
import os
import shutil

import jax
import numpy as np
import pytest
from flax import nnx

from bpd_jax import config_checks
from bpd_jax import distillation
from bpd_jax import evaluation
from bpd_jax import jobs
from bpd_jax.infra import errors
from bpd_jax.infra import workdir as workdir_lib
from bpd_jax.models import imports
from bpd_jax.training import runs
from bpd_jax.training import train

from train_configs import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, 'tests', 'data')
TINY_LLAMA3 = os.path.join(DATA, 'tiny_llama3')
TINY_GPT2 = os.path.join(DATA, 'tiny_gpt2')
CODE = 'def f(x):\n    return x + 1\n\n\nclass A:\n    pass\n'


def hf_config(arg, **eval_fields):
  config = load_config('hf_heads', arg)
  # A few prompts, one block size, one timed round: seconds.
  config.eval.update(dict(num_examples=3, ks=(2,), repeats=1), **eval_fields)
  config_checks.check(config)
  return config


@pytest.fixture
def code_folder(tmp_path):
  folder = tmp_path / 'code'
  folder.mkdir()
  for i in range(8):
    (folder / f'm{i}.py').write_text(CODE.replace('f(', f'f{i}('))
  (folder / 'notes.md').write_text('Not read with ext=.py.\n')
  return folder


def base_params(model) -> dict[str, np.ndarray]:
  """{path: value} of every parameter but the heads'."""
  return {jax.tree_util.keystr(path): np.asarray(value)
          for path, value in jax.tree_util.tree_leaves_with_path(
              nnx.state(model, nnx.Param))
          if "'heads'" not in jax.tree_util.keystr(path)}


def assert_base_is_the_checkpoints(model, folder):
  trained, imported = base_params(model), base_params(
      imports.load_model(folder))
  assert trained.keys() == imported.keys() and len(trained) > 10
  for name, value in imported.items():
    assert trained[name].dtype == value.dtype, name
    np.testing.assert_array_equal(trained[name], value, err_msg=name)


@pytest.mark.parametrize('folder,heads', [
    (TINY_LLAMA3, 'block'),
    pytest.param(TINY_LLAMA3, 'sequential', marks=pytest.mark.slow),
    pytest.param(TINY_GPT2, 'sequential', marks=pytest.mark.slow)])
def test_heads_train_on_the_frozen_base_and_decode_exactly(folder, heads,
                                                           code_folder,
                                                           tmp_path):
  config = hf_config(f'model={folder},k=3,steps=3,data={code_folder},'
                     f'ext=.py,heads={heads}')
  assert config.task.name == 'text_files'
  assert config.train.head_targets == 'base'  # The verifier's own.
  workdir = str(tmp_path / 'run')
  lines = []
  model, task = train.train(config, workdir, log=lines.append)
  assert f'Warm start of the base from {folder}.' in lines
  assert_base_is_the_checkpoints(model, folder)
  # The checkpoint's own ids, in the data and in the model.
  assert task.vocab.bos_id == model.config.bos_id != 2
  assert task.vocab.pad_id == model.config.pad_id == -1
  # Beside the trained heads, prompt lookup (no training).
  config.eval.drafters = ('lookup:min=1',)
  report = evaluation.report(config, workdir, model, task,
                             log=lambda _: None)
  rows = report['rows']
  assert [r['decoder'] for r in rows][-1].endswith('lookup:min=1')
  assert all(r['identical_to_greedy'] == 1.0 for r in rows)


def test_prompts_continued_by_the_imported_base_then_heads_on_them(tmp_path):
  prompts = tmp_path / 'prompts.jsonl'
  prompts.write_text(''.join(json.dumps({'prompt': f'def f{i}(x):'}) + '\n'
                             for i in range(21)))
  arg = f'model={TINY_LLAMA3},data={prompts},k=3,steps=2'
  config = hf_config(arg)
  workdir, corpus = str(tmp_path / 'run'), str(tmp_path / 'continued')
  with pytest.raises(errors.DataError, match=r'21 of 21 have no target: '
                     r'prompts alone, which python -m bpd_jax.distill '
                     r'continues first'):
    train.train(config, workdir, log=lambda _: None)
  # The distill job's model: the run has no checkpoint, so the imported
  # base (with untrained heads) continues the prompts.
  model, task = jobs.load(config, workdir)
  assert_base_is_the_checkpoints(model, TINY_LLAMA3)
  counts = distillation.distill(config, model, task, corpus,
                                log=lambda _: None, batch_size=8)
  assert counts == {'train': 21}
  config = hf_config(f'{arg},distilled={corpus}')
  model, task = train.train(config, workdir, log=lambda _: None)
  assert_base_is_the_checkpoints(model, TINY_LLAMA3)
  # Held out: prompt 19 and the base's own continuation of it.
  (prompt, reference), = task.eval_ids('validation')
  assert len(prompt) and len(reference) == config.eval.max_len
  # Beside the trained heads, prompt lookup (no training).
  config.eval.drafters = ('lookup:min=1',)
  report = evaluation.report(config, workdir, model, task,
                             log=lambda _: None)
  rows = report['rows']
  assert [r['decoder'] for r in rows][-1].endswith('lookup:min=1')
  assert all(r['identical_to_greedy'] == 1.0 for r in rows)


def one_file_config(tmp_path):
  data = tmp_path / 'one.txt'  # No extension of code: read as it is named.
  data.write_text(CODE * 8)
  config = hf_config(f'model={TINY_LLAMA3},data={data},k=2,steps=1')
  assert (config.task.name, config.task.root) == ('text_files', str(data))
  return config


@pytest.mark.parametrize('job,init', [('bpd_jax.main', None),
                                      ('bpd_jax.distill', 'checkpoint')])
def test_one_file_is_data(tmp_path, job, init):
  """data=FILE, as the docs offer it: the task both jobs open reads it;
  on a new workdir neither has a word to say about records it lacks."""
  config = one_file_config(tmp_path)
  workdir, said = str(tmp_path / 'run'), []
  # As jobs.setup opens it: the config's record, then the task's.
  workdir_lib.check_config(config, workdir, job, training=init is None,
                           log=said.append, write=False)
  task, _ = runs.open_run(config, workdir, job, init, log=said.append)
  assert len(task.encoded('train')) and len(task.encoded('validation'))
  assert said == []


@pytest.mark.slow  # Two compilations; test_one_file_is_data is the fast one.
def test_one_file_is_data_for_distill_and_training(tmp_path):
  """data=FILE end to end: the distill job continues its prompts with the
  imported base, and the heads train on it."""
  config = one_file_config(tmp_path)
  workdir = str(tmp_path / 'run')
  model, task = jobs.load(config, workdir)  # The distill job's.
  counts = distillation.distill(config, model, task,
                                str(tmp_path / 'continued'),
                                log=lambda _: None, batch_size=8)
  assert counts['train'] == len(task.encoded('train')) > 0
  model, _ = train.train(config, workdir, log=lambda _: None)
  assert_base_is_the_checkpoints(model, TINY_LLAMA3)


def test_the_model_section_is_the_checkpoints(code_folder, tmp_path):
  config = hf_config(f'model={TINY_LLAMA3},data={code_folder}')
  assert (config.model.d_model, config.model.num_kv_heads) == (64, 2)
  assert config.model.rope_scaling['kind'] == 'llama3'
  assert (config.model.eos_id, config.model.stop_ids) == (371, (374, 375))
  config.model.d_ff = 64
  with pytest.raises(errors.ConfigError, match=r'another architecture .* '
                     r'd_ff=64 \(the checkpoint: 128\)'):
    train.train(config, str(tmp_path / 'run'), log=lambda _: None)


def test_a_vocabulary_of_another_model_is_refused_at_start(code_folder,
                                                          tmp_path):
  config = hf_config(f'model={TINY_LLAMA3},data={code_folder}')
  config.task.vocab_path = os.path.join(DATA, 'tiny_qwen2')
  with pytest.raises(errors.ConfigError, match=r"^the model's special ids "
                     r'\(pad_id=-1, eos_id=371, bos_id=370, stop_ids=\(374, '
                     r"375\)\) are not the task vocabulary's \(pad_id=-1, "
                     r'eos_id=379, bos_id=377, stop_ids=\(377,\)\)'):
    train.train(config, str(tmp_path / 'run'), log=lambda _: None)


def test_the_default_data_is_the_standard_librarys_source():
  config = load_config('hf_heads', f'model={TINY_GPT2}')
  assert (config.task.name, config.task.root) == ('python_source', '')
  assert (config.task.vocab_type, config.task.vocab_path) == ('hf',
                                                              TINY_GPT2)
  # Sizes follow the checkpoint's 64 positions.
  assert (config.task.max_target_len, config.task.max_source_len,
          config.eval.max_len) == (32, 8, 16)


@pytest.mark.parametrize('arg,error,message', [
    ('k=4', ValueError, 'needs model=DIR: a Hugging Face model folder'),
    (f'model={TINY_GPT2},k=1', ValueError, 'k=1 must be >= 2'),
    ('model=/nonexistent', FileNotFoundError,
     r'checkpoint folder /nonexistent not found'),
    (f'model={DATA}', FileNotFoundError,
     r'data/config.json not found: a Hugging Face model folder holds it'),
    (f'model={TINY_GPT2},data=/nonexistent.jsonl', FileNotFoundError,
     r'data=/nonexistent.jsonl: no such folder or file'),
    (f'model={TINY_GPT2},ext=.py', ValueError,
     r'ext=.py picks the files of a folder: give data=DIR'),
    (f'model={TINY_GPT2},dtype=int8', ValueError, r"dtype='int8' is not one"),
])
def test_bad_options_are_one_line(arg, error, message):
  with pytest.raises(error, match=message) as raised:
    load_config('hf_heads', arg)
  assert '\n' not in str(raised.value)


def test_a_folder_of_another_model_names_its_config_json(tmp_path):
  folder = tmp_path / 'bert'
  shutil.copytree(TINY_GPT2, folder)
  (folder / 'config.json').write_text('{"model_type": "bert"}')
  with pytest.raises(errors.ConfigError, match=r"bert/config.json: "
                     r"model_type 'bert' is not imported"):
    load_config('hf_heads', f'model={folder}')
