"""Training job, driven by an ml_collections config file.

    python -m bpd_jax.main --config=configs/demo.py --workdir=/tmp/bpd_demo

Trains as the config says (rerunning on the same workdir resumes from the
latest checkpoint), then, with `eval.after_training`, decodes the eval split
with greedy and blockwise decoders and prints the comparison table (for an
image task, the super-resolution report of bpd_jax/sr_eval.py with its
image grid).
Overrides: `--config.train.base_steps=500`; options: `--config=FILE:key=value`.
"""

from absl import app
from absl import flags
from ml_collections import config_flags

from bpd_jax import config_checks
from bpd_jax import console
from bpd_jax import distributed
from bpd_jax import decode_eval
from bpd_jax import sr_eval
from bpd_jax import train
from bpd_jax.data import tasks

_CONFIG = config_flags.DEFINE_config_file(
    'config', None, 'Config file: a Python file with get_config(arg).')
_WORKDIR = flags.DEFINE_string(
    'workdir', None, 'Directory of checkpoints, vocabulary and reports.')
flags.mark_flags_as_required(['config', 'workdir'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  console.setup()
  config = _CONFIG.value
  config_checks.check(config)
  distributed.initialize()
  try:
    model, task = train.train(config, _WORKDIR.value)
  except train.Preempted as preempted:
    print(preempted)  # Saved; the rerun resumes. Not an error.
    return
  if config.eval.after_training:
    report = (sr_eval.report if config.task.name in tasks.IMAGE_TASKS
              else decode_eval.report)
    report(config, _WORKDIR.value, model, task)


if __name__ == '__main__':
  app.run(main)
