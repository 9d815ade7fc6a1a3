"""Benchmark job: greedy and blockwise decoding side by side
(`python -m bpd_jax.bench --config=configs/demo.py --workdir=/tmp/bpd_demo`).

Times, per batch size, greedy decoding and the sweep of `bench/settings.py`
(blockwise k x criteria x minimum blocks, trees, k='auto', sampling) on the
first --examples sentences of the eval split, interleaved, --repeats rounds,
medians; writes OUTPUT_DIR/bench.json, .md and .png (the columns:
docs/guide/benchmarks.md). --quick: under a minute, the machinery only;
meshes, mesh.param_rules, --sharding_table: bench/sharded.py."""

import os
import time

from absl import flags

from bpd_jax import draft_vocab
from bpd_jax import jobs
from bpd_jax.bench import report
from bpd_jax.bench import runner
from bpd_jax.bench import settings
from bpd_jax.bench import sharded
from bpd_jax.evaluation import text

_INIT = jobs.define_init()
flags.adopt_module_key_flags(jobs)  # --help lists --config, --workdir,
flags.adopt_module_key_flags(settings)  # and the bench's own flags.


def main(argv):
  job = jobs.setup(argv, init=_INIT.value, random_hint=True,
                   check=settings.parse)
  config, task, plan = job.config, job.task, job.options
  max_len, split = config.eval.max_len, config.eval.split
  decoder = sharded.decoder(config, job.model, plan.batch_sizes,
                            draft_vocab.of_task(
                                task, config.eval.draft_vocab_size),
                            plan.ngram(job.model.config.vocab_size))
  sources, _ = task.sources(split, decoder.config.max_source_len,
                            plan.examples)
  references = [target for _, target in task.pairs(split)[:plan.examples]]
  bleu = lambda tokens: text.bleu(
      [task.vocab.decode(row) for row in tokens], references,
      tokenized_text=task.vocab.tokenized_text)[0]
  tuning = plan.tune(decoder, task)
  begin = time.perf_counter()
  batches = plan.batches(sources, decoder.config.max_source_len,
                         decoder.config.pad_id)
  rows = runner.run(decoder, batches, plan.settings(tuning),
                    repeats=plan.repeats, quality=bleu,
                    progress=lambda line: print(line, flush=True))
  table = (sharded.table(job.model, config, batches[max(batches)][0][0],
                         max_len=max_len, k=max(plan.ks))
           if plan.sharding_table else None)  # Each rule set on the mesh.
  meta = report.meta(config, job.workdir, init=_INIT.value,
                     examples=len(sources), repeats=plan.repeats,
                     seconds=time.perf_counter() - begin)
  paths = report.write(rows, meta, plan.output_dir or os.path.join(
      job.workdir, 'bench'), table)
  print(report.tables(rows, table))
  print(f'Wrote {paths["json"]}, {paths["markdown"]} and {paths["plot"]}.')


if __name__ == '__main__':
  jobs.run(main)
