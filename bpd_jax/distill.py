"""Sequence-level distillation job: a trained model translates its training
set into a corpus that a config can train on.

    python -m bpd_jax.distill --config=configs/demo.py --workdir=/tmp/bpd_demo \
        --output_dir=/tmp/bpd_distilled

Restores the latest checkpoint of WORKDIR and writes the distilled corpus
to OUTPUT_DIR (bpd_jax/distillation.py: what it holds for a text
or a language-model task). OUTPUT_DIR must be new or empty (`--overwrite`
replaces the corpus files in a directory that holds some) and is never a
directory the job reads; both are checked before any decoding.
"""

from absl import flags
from absl import logging

from bpd_jax import distillation
from bpd_jax import jobs

_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', None, 'Directory for the distilled parallel corpus.')
_OVERWRITE = flags.DEFINE_bool(
    'overwrite', False, 'Replace the corpus files in an --output_dir that '
    'holds files (never one the job reads).')
_BATCH_SIZE = flags.DEFINE_integer(
    'batch_size', 64, 'Training sources decoded together (the output of '
    'each is the one it has alone).', lower_bound=1)

flags.adopt_module_key_flags(jobs)  # --help lists --config, --workdir.


def main(argv):
  def check(config):
    distillation.refuse_images(config)
    distillation.check_output_dir(config, jobs.WORKDIR.value,
                                  _OUTPUT_DIR.value, _OVERWRITE.value)

  job = jobs.setup(argv, init='checkpoint', check=check)
  logging.info('Distilling %s into %s', job.workdir, _OUTPUT_DIR.value)
  distillation.distill(job.config, job.model, job.task, _OUTPUT_DIR.value,
                       batch_size=_BATCH_SIZE.value, source=job.workdir)


if __name__ == '__main__':
  jobs.run(main, 'output_dir')
