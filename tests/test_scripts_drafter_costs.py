"""scripts/drafter_costs.py: every shape's model with every drafter, the
measurement at the tiny shape, and its refusals of bad flags."""

import math
import subprocess
import sys

import pytest

from bpd_jax.models import drafters
from train_configs import load_script

drafter_costs = load_script('drafter_costs')
SCRIPT = drafter_costs.__file__


@pytest.mark.parametrize('shape', sorted(drafter_costs.SHAPES))
def test_every_shape_takes_every_drafter(shape):
  """Configs only (the 1B model's weights would take 6 GB): each passes
  TransformerConfig's checks; the block drafters read a lower layer, the
  draft layer and the block drafters an encoder's source."""
  for name in drafters.NAMES:
    config = drafter_costs.config_of(shape, name, 8, prompt_len=32,
                                     max_len=64)
    assert config.head_layer == name and config.num_proposal_heads == 8
    assert config.max_target_len == 32 + 64 + 8
    block = name.startswith('block')
    assert bool(config.draft_feature_layers) == block
    reads_source = block or name == 'autoregressive'
    assert (config.draft_source == 'base') == (
        reads_source and config.num_encoder_layers > 0)


@pytest.mark.slow  # Compiles a decoding call per drafter and k.
def test_measure_gives_a_ratio_per_drafter_and_k():
  names = ['independent', 'block_corrected', drafter_costs.VERIFICATION]
  lines = []
  rows = drafter_costs.measure('tiny', names, [1, 2], rounds=2,
                               prompt_len=4, max_len=8, progress=lines.append)
  assert [row['drafter'] for row in rows] == names
  # Greedy's call is one program whatever the drafter: one T(1) for all.
  assert rows[0]['t1_ms'] == rows[1]['t1_ms']
  for row in rows:
    assert row['t1_ms'] > 0
    assert math.isfinite(row['T(2)/T(1)']) and row['T(2)/T(1)'] > 0
  # Every drafter once a round, the order rotated: round 2 starts second.
  assert len(lines) == 6 and 'round 2: block_corrected' in lines[3]
  # A drafting vocabulary: the same rows, proposals among 16 of 64 ids.
  rows = drafter_costs.measure('tiny', ['block'], [1, 2], rounds=1,
                               prompt_len=4, max_len=8,
                               progress=lambda line: None,
                               draft_vocab_size=16)
  assert math.isfinite(rows[0]['T(2)/T(1)'])
  with pytest.raises(ValueError, match=r'draft_vocab_size=65 must be in '
                     r'\[0, 64\]'):
    drafter_costs.measure('tiny', ['block'], [1, 2], rounds=1,
                          prompt_len=4, max_len=8, draft_vocab_size=65)


def test_bad_flags_are_refused_before_any_measurement(tmp_path):
  """Each bad flag refused with its message and nothing written; the
  scripts run at once, in subprocesses (each costs seconds of imports)."""
  cases = {'--shapes=code_lm,gpt-5': "--shapes: ['gpt-5'] not of",
           '--drafters=medusa': "--drafters: ['medusa'] not of",
           '--ks=0,4': '--ks=0,4: block sizes are integers >= 1.',
           '--ks=four': '--ks=four: block sizes',
           '--draft_vocab_size=2001': '--draft_vocab_size=2001 must be in '
                                      '[0, 2000] (the code_lm vocabulary).'}
  runs = {flag: subprocess.Popen(
      [sys.executable, SCRIPT, flag, f'--output_dir={tmp_path}'],
      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
          for flag in cases}
  for flag, message in cases.items():
    _, errors = runs[flag].communicate(timeout=300)
    assert runs[flag].returncode != 0 and message in errors, (flag, errors)
  assert not list(tmp_path.iterdir())
