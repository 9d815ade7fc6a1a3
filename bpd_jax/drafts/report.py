"""The draft job's report: its three steps on one model, and its files.

`run` takes the first drafts.num_examples sources of the eval split and
1. builds the n-gram model (the 'ngram' drafter's, and a rescorer) and
   the rescorers the refinements use (`rescorer_training.build`);
2. analyses the heads' drafts on the greedy outputs (`analysis.analyse`):
   block efficiency, consecutive repetition, head confidence by position,
   oracle top-t block efficiency;
3. decodes with plain blockwise decoding and each refinement for every k
   in drafts.ks, timed side by side (`compare.compare`).
It writes, through `evaluation.outputs` as every report does,
OUTPUT_DIR/drafts.json (everything, with the config) and drafts.md (the
comparison's table), and drafts.png (the plots), beside the rescorers the
first step saved.
"""

import os
import time
from typing import Callable, Sequence

import jax

from bpd_jax import generate
from bpd_jax import tasks
from bpd_jax.decoding import refine
from bpd_jax.drafts import analysis
from bpd_jax.drafts import compare
from bpd_jax.drafts import plots
from bpd_jax.drafts import rescorer_training
from bpd_jax.evaluation import outputs

JSON_FILE, TABLE_FILE, FIGURE_FILE = 'drafts.json', 'drafts.md', 'drafts.png'


def run(config, model, task: tasks.TextualTask,
        refinements: Sequence[refine.Refinement], text: list[list[int]],
        output_dir: str, *, workdir: str, init: str,
        log: Callable[[str], None]) -> dict:
  """The three steps, then the files; returns the report.

  Args:
    config: the checked config (its drafts and eval sections).
    model: the Transformer whose drafts are analysed.
    task: the text or language-model task.
    refinements: drafts.refinements parsed (`checks.check`).
    text: the rescorers' corpus (`rescorer_training.corpus`).
    output_dir: where the files go (made if missing).
    workdir, init: the run and its weights ('checkpoint' or 'random'),
      for the record.
    log: progress lines.

  Returns:
    dict(workdir, init, device, date, 'ngram' and 'lm' where built (their
    figures), analysis: `analysis.analyse`'s with each k's
    decoded_block_efficiency, compare: `compare.compare`'s).
  """
  d, max_len = config.drafts, config.eval.max_len
  os.makedirs(output_dir, exist_ok=True)
  result = dict(workdir=workdir, init=init, device=str(jax.devices()[0]),
                date=time.strftime('%Y-%m-%d %H:%M'))
  # The n-gram model always: it builds in seconds, and the 'ngram'
  # drafter (`decoding.Lookup`) reads it whatever the heads, refinement
  # or not (heads that read each other's proposals take none).
  rescorers, figures = rescorer_training.build(
      config, task, model.config, text,
      {'ngram'} | {r.rescorer for r in refinements}, output_dir, log)
  result.update(figures)
  sources, _ = task.sources(config.eval.split, model.config.max_source_len,
                            d.num_examples)
  decoder = generate.Decoder(model)
  result['analysis'] = analysis.analyse(decoder, sources, d, max_len, log)
  result['compare'] = compare.compare(decoder, sources, d, refinements,
                                      rescorers, max_len=max_len,
                                      progress=log)
  for k in d.ks:  # The simulation's plain efficiency beside the decoder's.
    plain = next(row for row in result['compare']['rows']
                 if row['k'] == k and not row['refinement'])
    result['analysis']['per_k'][k]['decoded_block_efficiency'] = (
        plain['mean_block'])
  write(result, config, output_dir, log)
  return result


def write(result: dict, config, output_dir: str,
          log: Callable[[str], None]) -> None:
  """JSON_FILE, TABLE_FILE (blank where a row has no value, as greedy's
  gains over plain decoding) and FIGURE_FILE in `output_dir`."""
  outputs.save_json(os.path.join(output_dir, JSON_FILE), result, config)
  table = outputs.save_table(os.path.join(output_dir, TABLE_FILE),
                             result['compare']['rows'], compare.COLUMNS,
                             missing='')
  plots.write(result, os.path.join(output_dir, FIGURE_FILE))
  log(table)
  written = [JSON_FILE, TABLE_FILE, FIGURE_FILE] + [
      name for name, figures in ((rescorer_training.NGRAM_FILE, 'ngram'),
                                 (rescorer_training.LM_DIR + '/', 'lm'))
      if figures in result]
  log(f'Wrote {", ".join(written)} in {output_dir}.')
