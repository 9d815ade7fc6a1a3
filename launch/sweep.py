#!/usr/bin/env python
"""A grid of runs over config options: printed, or launched one by one.

    python launch/sweep.py --config=configs/wmt14_base.py --workdir=/runs \
        --grid='k=2,4,6,8,10 base=frozen,finetuned' \
        --fixed='data_dir=/data/tfds,init_from=/runs/base' \
        [--launcher='launch/tpu_pod.sh run'] [--run]

--grid: space-separated NAME=V1,V2,...; a NAME with a dot is a config field
(train.head_steps=1000,2000 becomes --config.train.head_steps=...), any
other NAME a config option (the part after the colon). --fixed: options
every run shares. Each run gets its own workdir, WORKDIR/<name-value_...>.
Every run's config is built and checked (bpd_jax.config_checks) before
anything is printed or launched: an option or field the config does not
have stops the sweep with a message naming it. Without --run the commands
are printed (one per line, to paste or to feed a scheduler); with --run
they run in turn, each prefixed by --launcher (e.g. a pod-wide launcher).
"""

import argparse
import ast
import importlib.util
import itertools
import os
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bpd_jax import config_checks  # noqa: E402  (after the path is set)


def parse_grid(text: str) -> list[tuple[str, list[str]]]:
  """'k=2,4 base=frozen' -> [('k', ['2', '4']), ('base', ['frozen'])]."""
  grid = []
  for item in text.split():
    name, has_values, values = item.partition('=')
    if not has_values or not values:
      raise ValueError(f'grid entry {item!r} must be NAME=V1,V2,...')
    grid.append((name, values.split(',')))
  return grid


def load_get_config(path: str):
  if not os.path.isfile(path):
    raise FileNotFoundError(f'config file {path} not found.')
  spec = importlib.util.spec_from_file_location('sweep_config', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config


def set_field(config, name: str, value: str) -> None:
  """config.<name> = value, converted to the field's type; the field must
  exist."""
  *sections, field = name.split('.')
  node = config
  for section in sections:
    if section not in node:
      raise ValueError(f'{name} is not a config field (no section '
                       f'{section!r}).')
    node = node[section]
  if field not in node:
    raise ValueError(f'{name} is not a config field.')
  old = node[field]
  try:
    if isinstance(old, bool):
      if value.lower() not in ('true', 'false', '1', '0'):
        raise ValueError
      node[field] = value.lower() in ('true', '1')
    elif isinstance(old, str):
      node[field] = value
    else:
      parsed = ast.literal_eval(value)
      node[field] = float(parsed) if isinstance(old, float) else parsed
  except (ValueError, SyntaxError, TypeError):
    raise ValueError(f'{name}={value!r} is not a value of that field '
                     f'(now {old!r}).') from None


def runs(config_path: str, workdir: str, grid_text: str,
         fixed: str = '') -> list[list[str]]:
  """The command of every grid point, after checking its config."""
  get_config = load_get_config(config_path)
  grid = parse_grid(grid_text)
  commands = []
  for values in itertools.product(*(v for _, v in grid)):
    point = list(zip((n for n, _ in grid), values))
    options = [f'{n}={v}' for n, v in point if '.' not in n]
    fields = [(n, v) for n, v in point if '.' in n]
    arg = ','.join(filter(None, [fixed] + options))
    config = get_config(arg or None)
    for name, value in fields:
      set_field(config, name, value)
    config_checks.check(config)
    name = '_'.join(f'{n}-{v}' for n, v in point).replace('/', '-')
    commands.append(
        ['python', '-m', 'bpd_jax.main',
         f'--config={config_path}' + (f':{arg}' if arg else ''),
         f'--workdir={os.path.join(workdir, name)}'] +
        [f'--config.{n}={v}' for n, v in fields])
  return commands


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--config', required=True, help='config file')
  parser.add_argument('--workdir', required=True, help='parent of the runs')
  parser.add_argument('--grid', required=True, help="e.g. 'k=2,4 base=frozen'")
  parser.add_argument('--fixed', default='', help='options of every run')
  parser.add_argument('--launcher', default='', help='command prefix')
  parser.add_argument('--run', action='store_true', help='launch the runs')
  args = parser.parse_args(argv)
  try:
    commands = runs(args.config, args.workdir, args.grid, args.fixed)
  except (ValueError, FileNotFoundError) as error:
    print(f'sweep: {error} Nothing was launched.', file=sys.stderr)
    return 2
  prefix = shlex.split(args.launcher)
  for command in commands:
    print(shlex.join(prefix + command), flush=True)
    if args.run:
      subprocess.run(prefix + command, cwd=ROOT, check=True)
  return 0


if __name__ == '__main__':
  sys.exit(main())
