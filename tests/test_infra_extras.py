"""Decode-only installs: the image and plot packages are an extra.

A subprocess stands in for `pip install .` without the extra: there,
matplotlib, scikit-image and Pillow cannot be imported, as where they are
not installed.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from bpd_jax.infra import errors
from bpd_jax.infra import extras

import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A package whose entry in sys.modules is None is one Python cannot import
# (ModuleNotFoundError) nor find (importlib.util.find_spec: None).
WITHOUT_THE_EXTRA = textwrap.dedent('''
    import sys

    EXTRA = ('matplotlib', 'skimage', 'PIL')
    sys.modules.update(dict.fromkeys(EXTRA))
    ''')


def run_without_the_extra(code: str) -> subprocess.CompletedProcess:
  return subprocess.run(
      [sys.executable, '-c', WITHOUT_THE_EXTRA + textwrap.dedent(code)],
      cwd=ROOT, capture_output=True, text=True, timeout=300,
      env={**os.environ, 'XLA_FLAGS': xla_flags.COMPILE_FAST,
           'PYTHONPATH': ROOT})


def test_decoding_imports_no_image_or_plot_package():
  result = run_without_the_extra('''
      import numpy as np
      from flax import nnx

      from bpd_jax import decoding, generate, models
      # What every job imports, and the jobs' libraries.
      from bpd_jax import evaluation, jobs, tasks
      from bpd_jax.bench import report
      from bpd_jax.drafts import plots

      config = models.TransformerConfig(
          vocab_size=7, d_model=16, d_ff=32, num_heads=2,
          num_encoder_layers=1, num_decoder_layers=1, dropout_rate=0.0,
          max_source_len=8, max_target_len=16, num_proposal_heads=3,
          head_layer='independent', head_hidden=16)
      model = models.Transformer(config, rngs=nnx.Rngs(0))
      inputs = np.array([[3, 4, 5, 1, 0, 0, 0, 0]], np.int32)
      result = generate.Decoder(model).blockwise(inputs, k=3, max_len=8)
      assert result.tokens.shape == (1, 8), result.tokens.shape
      loaded = [name for name, module in sys.modules.items()
                if name.split('.')[0] in EXTRA and module is not None]
      assert not loaded, loaded
      ''')
  assert result.returncode == 0, result.stdout + result.stderr[-3000:]


def test_a_missing_package_is_one_line_naming_the_extra():
  result = run_without_the_extra('''
      from bpd_jax.infra import errors, extras, figures
      from bpd_jax.evaluation import image

      for needs in (figures.pyplot, extras.require,
                    lambda: image.psnr(None, None)):
        try:
          needs()
        except errors.MissingPackageError as error:
          print(error)
        else:
          raise AssertionError(f'{needs} ran without the extra')
      ''')
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.splitlines() == [
      "matplotlib is not installed: images and plots need the images "
      "extra: pip install 'bpd_jax[images]'",
      "matplotlib is not installed: images and plots need the images "
      "extra: pip install 'bpd_jax[images]'",
      "skimage is not installed: images and plots need the images "
      "extra: pip install 'bpd_jax[images]'"]


def test_an_image_task_asks_for_the_extra_before_any_work(monkeypatch):
  from bpd_jax import tasks
  from train_configs import load_config
  config = load_config('sr_demo')
  tasks.check(config)  # With the extra.
  monkeypatch.setattr(extras.importlib.util, 'find_spec',
                      lambda name: None if name == 'skimage' else name)
  with pytest.raises(errors.MissingPackageError, match=r"skimage is not "
                     r"installed: .* pip install 'bpd_jax\[images\]'$"):
    tasks.check(config)


def test_the_jobs_that_draw_figures_ask_for_the_extra_first(monkeypatch):
  from bpd_jax.drafts import checks
  from train_configs import load_config
  config = load_config('demo')
  monkeypatch.setattr(extras.importlib.util, 'find_spec',
                      lambda name: None if name == 'matplotlib' else name)
  with pytest.raises(errors.MissingPackageError, match='matplotlib is not '):
    checks.check(config)  # The draft job's check, before its decodes.


def test_an_installed_module_is_loaded():
  assert extras.load('os.path') is os.path
  extras.require()
