"""Draft analysis and refinement job (Kim et al. 2024).

    python -m bpd_jax.drafts --config=configs/demo.py --workdir=/tmp/bpd_demo

Restores the latest checkpoint in WORKDIR (or, with --init=random, a
randomly initialised model of the config: the machinery only), then
1. builds the n-gram model (interpolated Kneser-Ney, `drafts.ngram_order`)
   from `drafts.corpus` (the training targets, or a file of sentences such
   as a distilled corpus: the model's own outputs) and trains the small
   rescoring LM on the same text (`drafts.lm_*`), each only if one of
   `drafts.refinements` uses it;
2. decodes the first `drafts.num_examples` sentences of the eval split
   greedily and analyses the heads' drafts on them (`analysis.py`): block
   efficiency, consecutive repetition, head confidence by position, oracle
   top-t block efficiency;
3. decodes them with plain blockwise decoding and each of
   `drafts.refinements` for every k in `drafts.ks`, timed side by side
   (`compare.py`).
Writes OUTPUT_DIR/drafts.json (everything), drafts.md (the table),
drafts.png (the plots), ngram.npz and lm/ (the rescorers, reusable from
Python: `ngram.NgramModel.load`, `lm.load`; lm/ is an Orbax checkpoint),
each built only when a refinement uses it.
"""

import os
import time

from absl import app
from absl import flags
import jax
import numpy as np
import tabulate

from bpd_jax import generate
from bpd_jax import jobs
from bpd_jax import predictions
from bpd_jax import tasks
from bpd_jax.drafts import analysis
from bpd_jax.drafts import checks
from bpd_jax.drafts import compare
from bpd_jax.drafts import lm as lm_lib
from bpd_jax.drafts import plots
from bpd_jax.infra import atomic_files
from bpd_jax.models import factory
from bpd_jax.rescorers import ngram
from bpd_jax.tasks import batching

_INIT = jobs.define_init()
_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', None, 'Where the report and rescorers go (default: '
    'WORKDIR/drafts).')

flags.adopt_module_key_flags(jobs)  # --help lists --config, --workdir, --init.


def corpus(config, task) -> list[list[int]]:
  """The rescorers' training text as token ids (eos-ended)."""
  d = config.drafts
  if d.corpus == 'targets':
    pairs = task.pairs('train')
    texts = [target for _, target in pairs]
  else:
    if not os.path.isfile(d.corpus):
      raise ValueError(f'drafts.corpus={d.corpus!r}: no such file (give '
                       f"'targets' or a file of target sentences, one a "
                       f'line).')
    with open(d.corpus) as f:
      texts = [line.rstrip('\n') for line in f]
  texts = texts[:d.corpus_limit or None]
  eos = [factory.model_config_from(config, task.vocab.vocab_size).eos_id]
  return [ids + eos for ids in task.vocab.encode_many(texts)]


def _check(config) -> None:
  """The draft job's fields, before any work."""
  tasks.require_kind(config, ('text', 'lm'), job='drafts')
  checks.check(config, config.model.num_proposal_heads)


def main(argv):
  job = jobs.setup(argv, init=_INIT.value, random_hint=True, check=_check)
  config, model, task, workdir = job.config, job.model, job.task, job.workdir
  mc = model.config
  try:
    refinements = checks.check(config, mc.num_proposal_heads, mc.vocab_size)
    text = corpus(config, task)
  except ValueError as error:
    raise app.UsageError(str(error)) from error
  d = config.drafts
  output_dir = _OUTPUT_DIR.value or os.path.join(workdir, 'drafts')
  os.makedirs(output_dir, exist_ok=True)
  log = lambda line: print(line, flush=True)
  report = dict(config=config.to_dict(), workdir=workdir, init=_INIT.value,
                device=str(jax.devices()[0]),
                date=time.strftime('%Y-%m-%d %H:%M'))

  # 1. The rescorers the refinements use (none: the analysis alone).
  needed = {refinement.rescorer for refinement in refinements}
  rescorers = {}
  if 'ngram' in needed:
    begin = time.perf_counter()
    rescorers['ngram'] = ngram_model = ngram.build(
        text, order=d.ngram_order, vocab_size=mc.vocab_size,
        bos_id=mc.bos_id, eos_id=mc.eos_id)
    ngram_model.save(os.path.join(output_dir, 'ngram.npz'))
    report['ngram'] = dict(
        order=d.ngram_order, sentences=len(text),
        contexts=int(ngram_model.context_word.shape[0]),
        entries=int(ngram_model.entry_word.shape[0]),
        megabytes=round(ngram_model.nbytes() / 2**20, 2),
        build_s=round(time.perf_counter() - begin, 1))
    log(f'n-gram model: {report["ngram"]}')
  if 'neural' in needed:
    rescorers['neural'] = lm = lm_lib.make(
        mc.vocab_size, d.lm_window, d_model=d.lm_d_model, layers=d.lm_layers,
        seed=config.seed)
    log(f'Training the rescoring LM ({d.lm_steps} steps)...')
    report['lm'] = lm_lib.train(
        lm, lm_lib.windows(text, d.lm_window, bos_id=mc.bos_id,
                           eos_id=mc.eos_id), steps=d.lm_steps,
        seed=config.seed, log=log)
    held_out = [t + [mc.eos_id] for t in task.vocab.encode_many(
        [target for _, target in task.pairs(config.eval.split)])]
    report['lm']['eval_loss'] = round(lm_lib.evaluate(lm, lm_lib.windows(
        held_out, d.lm_window, bos_id=mc.bos_id, eos_id=mc.eos_id)), 4)
    lm_lib.save(lm, os.path.join(output_dir, 'lm'))
    log(f'rescoring LM: {report["lm"]}')

  # 2. Analysis on the greedy outputs.
  max_len = config.eval.max_len
  sources, _ = task.sources(config.eval.split, mc.max_source_len,
                            d.num_examples)
  decoder = generate.Decoder(model)
  padded = batching.pad_rows(sources, mc.max_source_len)
  outputs, lengths = [], []
  for start in range(0, len(padded), 32):
    result = decoder.greedy(padded[start:start + 32], max_len=max_len)
    outputs.append(np.asarray(result.tokens))
    lengths.append(np.asarray(result.lengths))
  outputs, lengths = np.concatenate(outputs), np.concatenate(lengths)
  heads = max(d.ks)
  top, conf = predictions.head_predictions(model, padded, outputs,
                                          heads=heads, top_t=max(d.top_ts))
  report['analysis'] = dict(
      examples=len(sources), tokens=int(lengths.sum()),
      confidence=analysis.confidence(top, conf, outputs, lengths),
      per_k={})
  for k in d.ks:
    oracle = {}
    for t in d.top_ts:
      tokens, calls = analysis.simulate_blocks(top, outputs, lengths, k, t)
      oracle[t] = round(tokens / calls, 3)
    report['analysis']['per_k'][k] = dict(
        repetition=analysis.repetition(top, outputs, lengths, k),
        oracle_block_efficiency=oracle)
    log(f'k={k}: {report["analysis"]["per_k"][k]}')

  # 3. Plain vs refined, timed side by side.
  batches = list(batching.eval_batches(sources, d.batch_size,
                                       mc.max_source_len))
  chosen = compare.variants(d.ks, list(zip(d.refinements, refinements)))
  rows = compare.run(decoder, batches, chosen, rescorers, max_len=max_len,
                     repeats=d.repeats, progress=log)
  report['compare'] = dict(batch_size=d.batch_size, repeats=d.repeats,
                           rows=rows)
  for k in d.ks:  # The simulation's plain efficiency beside the decoder's.
    measured = next(r for r in rows if r['k'] == k and not r['refinement'])
    report['analysis']['per_k'][k]['decoded_block_efficiency'] = (
        measured['mean_block'])

  atomic_files.write_json(os.path.join(output_dir, 'drafts.json'), report,
                          indent=2)
  table = tabulate.tabulate([[r[c] for c in compare.COLUMNS] for r in rows],
                            headers=compare.COLUMNS, tablefmt='github')
  atomic_files.write_text(os.path.join(output_dir, 'drafts.md'), table + '\n')
  plots.write(report, os.path.join(output_dir, 'drafts.png'))
  log(table)
  written = ['drafts.json', 'drafts.md', 'drafts.png'] + [
      name for name, rescorer in (('ngram.npz', 'ngram'), ('lm/', 'neural'))
      if rescorer in rescorers]
  log(f'Wrote {", ".join(written)} in {output_dir}.')


if __name__ == '__main__':
  jobs.run(main)
