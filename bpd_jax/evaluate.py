"""Evaluation job: restore the latest checkpoint and compare decoders.

    python -m bpd_jax.evaluate --config=configs/demo.py --workdir=/tmp/bpd_demo

Decodes the config's eval split greedily and blockwise (eval.ks, criteria,
min_block), prints a one-screen table and writes
WORKDIR/eval_<split>.json: BLEU (sacreBLEU on detokenized output, with its
signature), mean accepted block size, model calls, wall-clock, speedup over
greedy and the fraction of outputs identical to greedy's. For an image task
(configs/sr_demo.py, configs/celeba_sr.py) the report is bpd_jax/sr_eval.py's:
PSNR/SSIM, mean accepted block, time per image, WORKDIR/sr_<split>.json and
the image grid sr_<split>.png.
"""

from absl import app
from absl import flags
from ml_collections import config_flags

from bpd_jax import config_checks
from bpd_jax import decode_eval
from bpd_jax import distributed
from bpd_jax import sr_eval
from bpd_jax import tasks
from bpd_jax import train

_CONFIG = config_flags.DEFINE_config_file(
    'config', None, 'Config file: a Python file with get_config(arg).')
_WORKDIR = flags.DEFINE_string(
    'workdir', None, 'Workdir of the training run to evaluate.')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  config = _CONFIG.value
  config_checks.check(config)
  distributed.initialize()
  model, task = train.restore_model(config, _WORKDIR.value)
  report = (sr_eval.report if tasks.get(config.task.name).kind == 'image'
            else decode_eval.report)
  report(config, _WORKDIR.value, model, task)


if __name__ == '__main__':
  flags.mark_flags_as_required(['config', 'workdir'])
  app.run(main)
