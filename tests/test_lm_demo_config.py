"""configs/lm_demo.py: the code language model, its options, a short run."""

import json

import pytest

from bpd_jax import config_checks
from bpd_jax import distillation
from bpd_jax import evaluation
from bpd_jax.tasks.lm import python_source
from bpd_jax.training import train

from train_configs import load_config

CODE = 'import os\n\n\ndef f(x):\n    return os.path.join(x, "a")\n'


def lm_demo_config(arg=None):
  return load_config('lm_demo', arg)


@pytest.mark.parametrize('arg', ['', 'quick', 'heads=independent',
                                 'heads=autoregressive,quick',
                                 'prompt=512,k=4',
                                 'heads=block_corrected,correction=token'])
def test_every_option_passes_the_checks(arg):
  config = lm_demo_config(arg)
  config_checks.check(config)
  assert config.task.name == 'python_source'
  assert config.model.num_encoder_layers == 0


def test_bad_options():
  with pytest.raises(ValueError, match="heads='many' is not one of"):
    lm_demo_config('heads=many')
  with pytest.raises(ValueError, match="unknown config option 'kk'"):
    lm_demo_config('kk=4')
  with pytest.raises(ValueError, match='config option k=1 must be >= 2'):
    lm_demo_config('k=1')
  with pytest.raises(ValueError, match='config option prompt=0 must be'):
    lm_demo_config('prompt=0')
  with pytest.raises(ValueError, match='distilled corpus holds 32-token'):
    lm_demo_config('prompt=64,distilled=/run')


def test_long_prompts_set_the_example_and_the_positions():
  config = lm_demo_config('prompt=256')
  assert (config.task.max_source_len, config.task.max_target_len) == (256,
                                                                      384)
  assert config.eval.max_len == 128  # Each prompt continued for 128.
  # A decode: the start token, the prompt, 128 tokens and a block.
  assert config.model.max_target_len == 384 + 8
  assert config.train.batch_size * 384 <= 2_048


def test_k_sets_the_heads_and_the_block_sizes_reported():
  config = lm_demo_config('k=16,heads=block,init_from=/run,base=frozen')
  assert config.model.num_proposal_heads == 16
  assert config.eval.ks == (2, 4, 6, 8, 12, 16)
  assert config.train.head_loss_decay == 8.0  # k / 2.
  assert config.model.draft_feature_layers == (0,)  # Shallow (and top).
  assert lm_demo_config('k=4').eval.ks == (2, 4)


def short_run(tmp_path):
  """(a tiny lm_demo config over ten files of other code, a function of
  more config options giving it, the trained model, its task)."""
  root = tmp_path / 'code'
  wanted = {'train': 10, 'validation': 2, 'test': 1}
  for i in range(1000):
    split = python_source.split_of(f'pkg/m{i}.py')
    if wanted[split]:
      wanted[split] -= 1
      (root / 'pkg').mkdir(parents=True, exist_ok=True)
      (root / 'pkg' / f'm{i}.py').write_text(CODE.replace('f(', f'f{i}('))

  def tiny(arg):
    config = lm_demo_config(f'quick,root={root}{arg}')
    config.task.vocab_size = 512
    config.model.update(d_model=32, d_ff=64, num_proposal_heads=3,
                        head_hidden=32)
    config.train.update(head_steps=4, warmup_steps=2, log_every=2)
    config.eval.update(num_examples=2, ks=(2, 3), max_len=16)
    config_checks.check(config)
    return config

  config = tiny('')
  model, task = train.train(config, str(tmp_path / 'run'), log=lambda _: None)
  return config, tiny, model, task


def test_a_short_run_on_other_code_trains_and_decodes_exactly(tmp_path):
  config, _, model, task = short_run(tmp_path)
  report = evaluation.report(config, str(tmp_path / 'run'), model, task,
                             log=lambda _: None)
  assert report['examples'] == 2 and report['perplexity'] > 1
  assert [r['identical_to_greedy'] for r in report['rows']] == [1.0] * 3


# Slow: a distilled corpus is written and trained on by default in
# tests/test_distillation.py, and an LM task reads one back in
# tests/test_tasks_lm_jsonl_prompts.py.
@pytest.mark.slow
def test_the_papers_recipe_trains_on_the_models_own_continuations(tmp_path):
  # The model continues its training prompts, then trains on them from
  # where it stopped.
  config, tiny, model, task = short_run(tmp_path)
  corpus = tmp_path / 'distilled'
  counts = distillation.distill(config, model, task, str(corpus),
                                log=lambda _: None)
  info = json.loads((corpus / 'distilled.json').read_text())
  assert info['vocab_fingerprint'] == task.vocab.fingerprint
  config = tiny(f',init_from={tmp_path / "run"},distilled={corpus}')
  model, task = train.train(config, str(tmp_path / 'again'),
                            log=lambda _: None)
  prompts, continuations = task.encoded('train').lengths()
  assert len(prompts) == counts['train'] and (prompts == 32).all()
  assert continuations.max() <= 16
  report = evaluation.report(config, str(tmp_path / 'again'), model, task,
                             log=lambda _: None)
  assert [r['identical_to_greedy'] for r in report['rows']] == [1.0] * 3


def test_a_corpus_of_another_vocabulary_is_refused(tmp_path):
  # Two vocabularies of one size whose ids mean other words: the size alone
  # let a corpus train a model on the wrong text.
  from bpd_jax.infra import errors
  from bpd_jax.tasks import batching
  from bpd_jax.tasks.lm import task as task_lib
  from bpd_jax.tasks.text import vocab as vocab_lib
  ours = vocab_lib.WordVocabulary(['def', 'return'])
  theirs = vocab_lib.WordVocabulary(['return', 'def'])
  pairs = batching.EncodedPairs.from_pairs([([4, 5], [6, 1])])
  task_lib.write_distilled(str(tmp_path), pairs, ours, source='/runs/a')
  assert len(task_lib.read_distilled(str(tmp_path), ours)) == 1
  with pytest.raises(errors.DataError) as error:
    task_lib.read_distilled(str(tmp_path), theirs)
  assert str(error.value) == (
      f'the corpus in {tmp_path} has ids of another vocabulary: fingerprint '
      f'{ours.fingerprint} (6 ids, distilled from /runs/a) vs '
      f'{theirs.fingerprint} (6 ids) of the task: give the task the '
      'vocabulary of the run that distilled it (task.vocab_path, or '
      'init_from=RUN in configs/lm_demo.py).')
  # A corpus that records no fingerprint cannot be checked.
  (tmp_path / 'distilled.json').write_text('{"vocab_size": 6}')
  with pytest.raises(errors.DataError, match='records no vocabulary '
                     'fingerprint'):
    task_lib.read_distilled(str(tmp_path), ours)
  with pytest.raises(errors.MissingFileError, match='bpd_jax.distill'):
    task_lib.read_distilled(str(tmp_path / 'missing'), ours)


def test_frozen_drafters_on_a_trained_run():
  config = load_config('lm_demo', 'init_from=/runs/lm,base=frozen,heads='
                       'autoregressive,features=0,targets=base,inputs=own')
  config_checks.check(config)
  assert config.train.freeze_base and config.train.head1_weight == 0.0
  assert config.model.draft_feature_layers == (0,)
  assert (config.train.head_targets, config.train.draft_inputs) == ('base',
                                                                    'own')
  assert not load_config('lm_demo').train.freeze_base  # base=finetuned.
  for option, named in (('base=frozen', 'base=frozen'),
                        ('with_heads', 'with_heads')):
    with pytest.raises(ValueError, match=f'option {named} reads a trained '
                       'run: give init_from'):
      load_config('lm_demo', option)
  with pytest.raises(ValueError, match="base='thawed' is not one of"):
    load_config('lm_demo', 'base=thawed')


def test_a_frozen_base_drafter_fine_tuned_with_its_base():
  config = load_config('lm_demo', 'init_from=/runs/lm_frozen,with_heads,'
                       'heads=autoregressive,targets=base')
  config.train.base_learning_rate_scale = 0.1
  config_checks.check(config)
  assert config.train.init_heads and not config.train.freeze_base
  assert not load_config('lm_demo', 'init_from=/runs/lm').train.init_heads
