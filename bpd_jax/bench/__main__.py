"""Benchmark job: greedy and blockwise decoding side by side.

    python -m bpd_jax.bench --config=configs/demo.py --workdir=/tmp/bpd_demo

Restores the latest checkpoint in WORKDIR (or, with --init=random, a
randomly initialised model of the config's architecture), takes the first
--examples sentences of the config's eval split, and for each batch size
times greedy decoding, blockwise decoding over the sweep of k x criteria x
minimum block sizes, trees of the heads' candidates (--tree), and k='auto'
(tuned on training sources, not on the timed ones; with --tree_sizes it
may choose a tree), and with --sampler (or the config's eval.samplers)
ancestral and blockwise sampling, interleaved, --repeats rounds, medians. Writes
OUTPUT_DIR/bench.json (one row per setting, every column), bench.md (the
table) and bench.png (speedup and mean accepted block against k); see
docs/benchmarks.md for the columns and the measured figures.

--quick: a run under a minute that shows the machinery, not the figures.
"""

import os
import time

from absl import app
from absl import flags
import jax

from bpd_jax import auto_k
from bpd_jax import generate
from bpd_jax import jobs
from bpd_jax import tasks
from bpd_jax.bench import report
from bpd_jax.bench import runner
from bpd_jax.evaluation import text
from bpd_jax.models import heads as heads_lib
from bpd_jax.tasks import batching

_INIT = jobs.define_init()
_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', None, 'Where bench.json/.md/.png go (default: '
    'WORKDIR/bench).')
_BATCH_SIZES = flags.DEFINE_list('batch_sizes', ['1', '8', '32'],
                                 'Batch sizes.')
_KS = flags.DEFINE_list('ks', None, 'Block sizes (default: the config\'s '
                        'eval.ks).')
_CRITERIA = flags.DEFINE_list(
    'criteria', ['exact', 'top-k:2'],
    "Verification criteria: 'exact', 'top-k:T', 'distance:EPS'.")
_MIN_BLOCKS = flags.DEFINE_list('min_blocks', ['1'], 'Minimum block sizes.')
_SAMPLERS = flags.DEFINE_multi_string(
    'sampler', None, "A sampler, e.g. 'temperature=0.7,top_p=0.9' "
    '(repeatable): ancestral and blockwise sampling rows, timed against '
    "that ancestral sampling (default: the config's eval.samplers).")
_TREES = flags.DEFINE_multi_string(
    'tree', None, "A tree of the heads' candidates, as widths per depth, "
    "e.g. '2,2' (repeatable): a row at every k deeper than it, exact "
    'verification.')
_TREE_SIZES = flags.DEFINE_list(
    'tree_sizes', [], "Nodes of the trees k='auto' may choose too, each the "
    "most probable of that size (e.g. 16,32; exact verification).")
_EXAMPLES = flags.DEFINE_integer('examples', 256,
                                 'Eval sentences decoded per setting.',
                                 lower_bound=1)
_REPEATS = flags.DEFINE_integer('repeats', 3, 'Timed rounds per setting.',
                                lower_bound=1)
_CALIBRATION = flags.DEFINE_integer(
    'calibration_examples', 64,
    "Training sources k='auto' is tuned on (0: no auto setting).",
    lower_bound=0)
_QUICK = flags.DEFINE_boolean(
    'quick', False, 'Under a minute: batch sizes 1 and 8, the smallest and '
    'largest k, exact only, 16 sentences, 1 round, auto tuned on 16 '
    'sources (flags given explicitly keep their values).')

flags.adopt_module_key_flags(jobs)  # --help lists --config, --workdir, --init.


def _ints(name, values, low=1):
  try:
    out = [int(v) for v in values]
  except ValueError as error:
    raise app.UsageError(f'--{name}: {error}') from error
  if not out or min(out) < low:
    raise app.UsageError(f'--{name}={values} must be integers >= {low}.')
  return out


def _options(config) -> dict:
  """The sweep of the flags (--quick applied), checked before any work."""
  tasks.require_kind(config, ('text', 'lm'), job='bench')
  heads = config.model.num_proposal_heads
  ks = _ints('ks', _KS.value or list(config.eval.ks))
  if max(ks) > heads:
    raise app.UsageError(f'--ks={ks} exceed the model\'s {heads} heads.')
  batch_sizes = _ints('batch_sizes', _BATCH_SIZES.value)
  min_blocks = _ints('min_blocks', _MIN_BLOCKS.value)
  criteria = list(_CRITERIA.value)
  samplers = list(_SAMPLERS.value or config.eval.get('samplers', ()))
  examples, repeats = _EXAMPLES.value, _REPEATS.value
  calibration_examples = _CALIBRATION.value
  if _QUICK.value:  # Flags given explicitly keep their values.
    given = lambda flag: flags.FLAGS[flag.name].present
    batch_sizes = batch_sizes if given(_BATCH_SIZES) else [1, 8]
    ks = ks if given(_KS) else sorted({min(ks), max(ks)})
    criteria = criteria if given(_CRITERIA) else ['exact']
    min_blocks = min_blocks if given(_MIN_BLOCKS) else [1]
    examples = examples if given(_EXAMPLES) else 16
    repeats = repeats if given(_REPEATS) else 1
    calibration_examples = (calibration_examples if given(_CALIBRATION)
                            else min(calibration_examples, 16))
  tree_sizes = _ints('tree_sizes', _TREE_SIZES.value, low=2) \
      if _TREE_SIZES.value else []
  if tree_sizes and not calibration_examples:
    raise app.UsageError('--tree_sizes are the auto setting\'s: they need '
                         '--calibration_examples > 0.')
  settings = runner.sweep(ks, criteria, min_blocks,
                          auto=calibration_examples > 0, samplers=samplers,
                          trees=list(_TREES.value or ()))
  for spec in settings:  # Samplers and criteria checked together.
    if spec.kind != 'auto':
      spec.options(config.eval.max_len).check(
          heads, 2**31, heads_lib.dependent(config.model.head_layer))
  return dict(ks=ks, batch_sizes=batch_sizes, examples=examples,
              repeats=repeats, calibration_examples=calibration_examples,
              settings=settings, tree_sizes=tree_sizes)


def main(argv):
  job = jobs.setup(argv, init=_INIT.value, random_hint=True, check=_options)
  config, model, task, workdir = job.config, job.model, job.task, job.workdir
  options = job.options
  ks, examples = options['ks'], options['examples']
  repeats = options['repeats']
  output_dir = _OUTPUT_DIR.value or os.path.join(workdir, 'bench')

  max_source_len = model.config.max_source_len
  max_len = config.eval.max_len
  split = config.eval.split
  sources, _ = task.sources(split, max_source_len, examples)
  references = [target for _, target in task.pairs(split)[:examples]]
  batches = {b: list(batching.eval_batches(sources, b, max_source_len))
             for b in options['batch_sizes']}

  decoder = generate.Decoder(model)
  tuning = None
  if options['calibration_examples']:
    calibration, _ = task.sources('train', max_source_len,
                                  options['calibration_examples'])
    print(f'Tuning k=auto on {len(calibration)} training sources...',
          flush=True)
    tuning = auto_k.tune_k(
        decoder, batching.pad_rows(calibration, max_source_len),
        max_len=max_len, candidates=ks, tree_sizes=options['tree_sizes'])

  def bleu(tokens):
    return text.bleu([task.vocab.decode(row) for row in tokens], references,
                     tokenized_text=task.vocab.tokenized_text)[0]

  begin = time.perf_counter()
  rows = runner.run(decoder, batches, options['settings'], max_len=max_len,
                    repeats=repeats, tuning=tuning, quality=bleu,
                    progress=lambda line: print(line, flush=True))
  meta = dict(
      config=config.to_dict(), workdir=workdir, init=_INIT.value,
      split=split, examples=len(sources), max_len=max_len, repeats=repeats,
      quality='BLEU (sacreBLEU, detokenized)', device=str(jax.devices()[0]),
      devices=jax.device_count(), seconds=round(time.perf_counter() - begin),
      date=time.strftime('%Y-%m-%d %H:%M'))
  paths = report.write(rows, meta, output_dir)
  print(report.markdown(rows))
  print(f'Wrote {paths["json"]}, {paths["markdown"]} and {paths["plot"]}.')


if __name__ == '__main__':
  jobs.run(main)
