"""Command-line entry point, driven by an ml_collections config file.

    python -m bpd_jax.main --config=configs/demo.py --workdir=/tmp/bpd_demo

Overrides: `--config.decode.max_len=32`; options: `--config=FILE:key=value`.
Runs the decoding demo of the config (greedy vs blockwise, side by side).
"""

from absl import app
from absl import flags
from ml_collections import config_flags

from bpd_jax import demo

_CONFIG = config_flags.DEFINE_config_file(
    'config', None, 'Config file: a Python file with get_config(arg).')
_WORKDIR = flags.DEFINE_string(
    'workdir', None, 'Directory for the reports the job writes.')
flags.mark_flags_as_required(['config', 'workdir'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  demo.run(_CONFIG.value, _WORKDIR.value)


if __name__ == '__main__':
  app.run(main)
