"""The draft job, in a subprocess, as a user runs it."""

import json

import pytest

from test_main import TINY, run

SMALL = ['--config.drafts.ks=(2,3)', '--config.drafts.num_examples=4',
         '--config.drafts.repeats=1', '--config.drafts.top_ts=(1,2)',
         '--config.drafts.lm_steps=3', '--config.drafts.lm_window=4',
         '--config.drafts.corpus_limit=200',
         "--config.drafts.refinements=('ngram:p=2,t=2,w=0.2','neural:t=2')"]


@pytest.mark.slow  # ~35 s: a subprocess that compiles seven decoders.
def test_analysis_and_comparison_of_a_random_model(tmp_path):
  result = run('drafts', *TINY, *SMALL, f'--workdir={tmp_path}',
               '--init=random')
  assert result.returncode == 0, result.stderr[-3000:]
  out = tmp_path / 'drafts'
  report = json.loads((out / 'drafts.json').read_text())
  names = [r['decoder'] for r in report['compare']['rows']]
  assert names == ['greedy', 'k=2 plain', 'k=2 ngram:p=2,t=2,w=0.2',
                   'k=2 neural:t=2', 'k=3 plain', 'k=3 ngram:p=2,t=2,w=0.2',
                   'k=3 neural:t=2']
  assert all(r['identical_to_greedy'] == 1.0
             for r in report['compare']['rows'])
  for k, stats in report['analysis']['per_k'].items():
    # The simulation of plain decoding is the decoder's own count.
    assert stats['oracle_block_efficiency']['1'] == \
        stats['decoded_block_efficiency'], k
  assert len(report['analysis']['confidence']['accuracy']) == 3
  for name in ('drafts.png', 'drafts.md', 'ngram.npz', 'lm'):
    assert (out / name).exists()


@pytest.mark.slow  # ~30 s: two subprocesses, three decoders compiled.
def test_heads_that_read_each_other_are_analysed_and_refuse_refinement(
    tmp_path):
  """The draft layer: the analysis and plain decoding, and the n-gram
  model the 'ngram' drafter reads (no neural rescorer); a refinement is
  refused by the head type's name before any work."""
  # The draft layer reads every position: its training takes them all.
  heads = ['--config.model.head_layer=autoregressive',
           '--config.train.head_position_fraction=1.0']
  plain = [flag for flag in SMALL if 'refinements' not in flag]
  result = run('drafts', *TINY, *plain, *heads, f'--workdir={tmp_path}',
               '--init=random', '--config.drafts.refinements=()')
  assert result.returncode == 0, result.stderr[-3000:]
  out = tmp_path / 'drafts'
  report = json.loads((out / 'drafts.json').read_text())
  assert [r['decoder'] for r in report['compare']['rows']] == [
      'greedy', 'k=2 plain', 'k=3 plain']
  for k, stats in report['analysis']['per_k'].items():
    assert stats['oracle_block_efficiency']['1'] == \
        stats['decoded_block_efficiency'], k
  assert (out / 'ngram.npz').exists() and not (out / 'lm').exists()
  assert 'lm' not in report and 'ngram' in report
  result = run('drafts', *TINY, *SMALL, *heads, f'--workdir={tmp_path}',
               '--init=random')
  assert result.returncode != 0
  assert "'autoregressive' heads read each other's" in result.stderr
  assert 'set --config.drafts.refinements=()' in result.stderr


# Each check is a job's start (seconds of imports): one by default, the
# others slow; each is tested in-process by default too (tests/test_jobs.py's
# missing checkpoint, tests/test_drafts_checks.py's refinement,
# tests/test_drafts_rescorer_training.py's corpus).
@pytest.mark.parametrize('flags,message', [
    (["--config.drafts.refinements=('none:p=3',)"], 'drafts=3 exceeds'),
    pytest.param(['--config.drafts.corpus=/no/such/file'], 'no such file',
                 marks=pytest.mark.slow),
    pytest.param(None, 'no checkpoints in', marks=pytest.mark.slow)])
def test_bad_fields_and_missing_inputs_stop_before_work(tmp_path, flags,
                                                        message):
  command = (TINY if flags is None else
             [*TINY, *SMALL, '--init=random', *flags])
  result = run('drafts', *command, f'--workdir={tmp_path}')
  assert result.returncode != 0 and message in result.stderr


def test_image_tasks_are_refused(tmp_path):
  result = run('drafts', '--config=configs/sr_demo.py:quick',
               f'--workdir={tmp_path}', '--init=random')
  assert result.returncode != 0
  assert "task.name='embedded_images' is an image task" in result.stderr
