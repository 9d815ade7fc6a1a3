"""A tiny training config for tests: seconds per run on a CPU."""

import importlib.util
import os
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
