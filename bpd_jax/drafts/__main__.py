"""Draft analysis and refinement job (Kim et al. 2024).

    python -m bpd_jax.drafts --config=configs/demo.py --workdir=/tmp/bpd_demo

Restores the latest checkpoint in WORKDIR (or, with --init=random, a
randomly initialised model of the config: the machinery only), builds the
n-gram model (what the 'ngram' drafter reads, whatever the heads) and the
rescorers of drafts.refinements, analyses the heads' drafts and times
plain against refined decoding (`report.run`: the steps and the files,
OUTPUT_DIR/drafts.json, drafts.md, drafts.png, ngram.npz, lm/).
"""

import os

from absl import app
from absl import flags

from bpd_jax import jobs
from bpd_jax import tasks
from bpd_jax.drafts import checks
from bpd_jax.drafts import report
from bpd_jax.drafts import rescorer_training

_INIT = jobs.define_init()
_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', None, 'Where the report and rescorers go (default: '
    'WORKDIR/drafts).')

flags.adopt_module_key_flags(jobs)  # --help lists --config, --workdir, --init.


def _check(config) -> None:
  """The draft job's fields, before any work."""
  tasks.require_kind(config, ('text', 'lm'), job='drafts')
  checks.check(config, config.model.num_proposal_heads)


def main(argv):
  job = jobs.setup(argv, init=_INIT.value, random_hint=True, check=_check)
  model_config = job.model.config
  try:  # What needs the model's heads and vocabulary, and the corpus file.
    refinements = checks.check(job.config, model_config.num_proposal_heads,
                               model_config.vocab_size)
    text = rescorer_training.corpus(job.config.drafts, job.task,
                                    model_config.eos_id)
  except ValueError as error:
    raise app.UsageError(str(error)) from error
  report.run(job.config, job.model, job.task, refinements, text,
             _OUTPUT_DIR.value or os.path.join(job.workdir, 'drafts'),
             workdir=job.workdir, init=_INIT.value,
             log=lambda line: print(line, flush=True))


if __name__ == '__main__':
  jobs.run(main)
