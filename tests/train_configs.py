"""A tiny training config for tests: seconds per run on a CPU."""

import importlib.util
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, 'scripts')


def _load_module(name: str, path: str):
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def load_script(name):
  """scripts/NAME.py as a module (scripts/ is not a package); scripts/ is
  put on sys.path, as running a script from it does, so that a script
  imports its siblings."""
  if SCRIPTS not in sys.path:
    sys.path.insert(0, SCRIPTS)
  return _load_module(name, os.path.join(SCRIPTS, f'{name}.py'))


def load_config(name, arg=None):
  """configs/NAME.py's get_config(arg), loaded as config_flags loads it."""
  return _load_module(f'{name}_config', os.path.join(
      ROOT, 'configs', f'{name}.py')).get_config(arg)


def demo_config(arg=None):
  """configs/demo.py's get_config(arg)."""
  return load_config('demo', arg)


def tiny_config(**sections):
  """The demo config shrunk; `sections` maps 'train' etc. to field dicts.

  Its heads are the demo's (sequential, trained on half the positions),
  in two phases (a base phase, then the heads with the base).
  """
  config = demo_config()
  config.task.sizes = dict(train=400, validation=8)
  # Dropout on (the demo has none), so that the resume and device-count
  # tests cover its randomness too; the learning rate the tests were set at.
  config.model.update(d_model=32, d_ff=64, num_heads=2, num_encoder_layers=1,
                      num_decoder_layers=1, num_proposal_heads=3,
                      head_hidden=32, dropout_rate=0.1)
  # Fixed batches of 16 pairs (the demo buckets by length): one compiled
  # step a phase.
  config.train.update(batch_size=16, tokens_per_batch=0, base_steps=12,
                      head_steps=8, learning_rate=2e-3, warmup_steps=5,
                      log_every=4, checkpoint_every=6)
  config.mesh.shape = (1,)
  config.eval.update(num_examples=8, batch_size=4, ks=(2, 3), max_len=26)
  for section, fields in sections.items():
    config[section].update(fields)
  return config


TINY_LLAMA3 = os.path.join(ROOT, 'tests', 'data', 'tiny_llama3')
CODE = 'def f(x):\n    return x + 1\n\n\nclass A:\n    pass\n'


def frozen_base_run(root, steps: int = 4):
  """(config, model folder, workdir) of configs/hf_heads.py on a copy of
  tests/data/tiny_llama3 in `root` (a test may change its weights), its
  frozen base under 4 sequential heads that train `steps` steps on a few
  code files; the workdir holds the config's record, as the training job
  writes it at its first start, and nothing else yet."""
  # Imported here: the config files that import this module (the jobs'
  # subprocesses) read none of the library's modules.
  from bpd_jax import config_checks
  from bpd_jax.infra import workdir as workdir_lib
  model = os.path.join(root, 'tiny_llama3')
  if not os.path.isdir(model):
    shutil.copytree(TINY_LLAMA3, model)
  code = os.path.join(root, 'code')
  os.makedirs(code, exist_ok=True)
  for i in range(8):
    with open(os.path.join(code, f'm{i}.py'), 'w') as f:
      f.write(CODE.replace('f(', f'f{i}('))
  config = load_config('hf_heads', f'model={model},data={code},ext=.py,k=4,'
                                   f'steps={steps}')
  config.train.log_every = 1
  config_checks.check(config)
  workdir = os.path.join(root, f'run{steps}')
  workdir_lib.check_config(config, workdir, 'bpd_jax.main', training=True,
                           log=lambda _: None)
  return config, model, workdir
