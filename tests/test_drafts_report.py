"""The draft job's three steps in one process: the report and its files."""

import json

import pytest

from bpd_jax import tasks
from bpd_jax.drafts import checks
from bpd_jax.drafts import compare
from bpd_jax.drafts import report
from bpd_jax.drafts import rescorer_training
from bpd_jax.evaluation import outputs
from bpd_jax.models import factory

import train_configs

REFINEMENT = 'ngram:p=2,t=2,w=0.2'


@pytest.mark.slow  # Compiles three decoders and the analysis' passes.
def test_the_steps_write_the_report_the_table_and_the_rescorers(tmp_path):
  config = train_configs.tiny_config(model=dict(head_layer='independent'))
  config.drafts.update(ks=(2,), num_examples=3, batch_size=3, repeats=1,
                       top_ts=(1, 2), corpus_limit=50, ngram_order=2,
                       refinements=(REFINEMENT,))
  config.eval.max_len = 8
  task = tasks.load_task(config.task, str(tmp_path))
  model = factory.random_model(config, task.vocab.vocab_size)
  refinements = checks.check(config, 3, model.config.vocab_size)
  text = rescorer_training.corpus(config.drafts, task, model.config.eos_id)
  assert len(text) == 50 and all(ids[-1] == model.config.eos_id
                                 for ids in text)
  out, lines = tmp_path / 'drafts', []
  result = report.run(config, model, task, refinements, text, str(out),
                      workdir=str(tmp_path), init='random',
                      log=lines.append)

  saved = json.loads((out / 'drafts.json').read_text())
  assert list(saved) == ['workdir', 'init', 'device', 'date', 'ngram',
                         'analysis', 'compare', 'config']
  assert saved['config']['drafts']['refinements'] == [REFINEMENT]
  rows = saved['compare']['rows']
  assert [r['decoder'] for r in rows] == ['greedy', 'k=2 plain',
                                          f'k=2 {REFINEMENT}']
  assert all(r['identical_to_greedy'] == 1.0 for r in rows)
  # The simulation of plain decoding is the decoder's own count.
  stats = saved['analysis']['per_k']['2']
  assert stats['oracle_block_efficiency']['1'] == (
      stats['decoded_block_efficiency'])
  # The table leaves greedy's gains over plain decoding blank.
  table = (out / 'drafts.md').read_text()
  assert table == outputs.table(result['compare']['rows'], compare.COLUMNS,
                                missing='') + '\n'
  greedy = [cell.strip() for cell in table.splitlines()[2].split('|')[1:-1]]
  assert greedy[0] == 'greedy' and greedy[3] == greedy[5] == ''
  assert (out / 'drafts.png').read_bytes()[:4] == b'\x89PNG'
  assert (out / 'ngram.npz').exists() and not (out / 'lm').exists()
  assert lines[-1] == (f'Wrote drafts.json, drafts.md, drafts.png, '
                       f'ngram.npz in {out}.')
