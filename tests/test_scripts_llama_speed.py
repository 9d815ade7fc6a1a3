"""scripts/llama_speed.py: its torch-free parts, and the whole measurement
at a tiny shape where torch and transformers are installed (CI has
neither: those tests skip)."""

import json
import os

import pytest

from train_configs import load_script

llama_speed = load_script('llama_speed')
OURS = llama_speed.hf_baseline.OURS


def greedy_row(shape, dtype, system, tokens_per_s):
  return dict(shape=shape, dtype=dtype, system=system,
              tokens_per_s=tokens_per_s)


def test_targets_take_each_side_in_its_fastest_dtype():
  greedy = [greedy_row('s', 'bfloat16', OURS, 40.0),
            greedy_row('s', 'bfloat16', llama_speed.HF_STATIC, 30.0),
            greedy_row('s', 'float32', OURS, 60.0),
            greedy_row('s', 'float32', llama_speed.HF_DYNAMIC, 20.0)]
  steps = [dict(shape='llama-3.2-1b', dtype='bfloat16', t1_ms=10.0,
                t8_over_t1=1.6),
           dict(shape='llama-3.2-1b', dtype='float32', t1_ms=20.0,
                t8_over_t1=1.2)]
  first, second = llama_speed.targets(greedy, steps)
  assert first['figure'] == pytest.approx(2.0)  # 60 (f32) / 30 (bf16).
  assert first['met']
  assert 'ours float32' in first['detail']
  assert 'hf generate static bfloat16' in first['detail']
  # Only bfloat16 at the 1B shape counts: 1.6 > 1.5.
  assert second['figure'] == pytest.approx(1.6) and not second['met']


def test_prompt_starts_with_bos_and_holds_no_other_special_id():
  config = type('Config', (), dict(bos_id=1, eos_id=2, pad_id=-1,
                                   stop_ids=(3,), vocab_size=6))
  prompt = llama_speed.make_prompt(config, 12)
  assert prompt.shape == (1, 12) and prompt[0, 0] == 1
  assert set(prompt[0, 1:].tolist()) <= {0, 4, 5}


def test_every_shape_is_a_llama_config():
  transformers = pytest.importorskip('transformers')
  for fields in llama_speed.SHAPES.values():
    config = transformers.LlamaConfig(**fields).to_dict()
    assert {name: config[name] for name in fields} == fields


def test_checkpoint_is_written_once_and_checked(tmp_path):
  pytest.importorskip('torch')
  pytest.importorskip('transformers')
  folder = llama_speed.write_checkpoint('tiny', str(tmp_path))
  with open(os.path.join(folder, 'config.json')) as f:
    config = json.load(f)
  assert config['dtype'] == 'bfloat16'
  assert os.listdir(tmp_path) == ['tiny']  # No temporary folder left.
  stamp = os.path.getmtime(os.path.join(folder, 'config.json'))
  assert llama_speed.write_checkpoint('tiny', str(tmp_path)) == folder
  assert os.path.getmtime(os.path.join(folder, 'config.json')) == stamp
  config['hidden_size'] = 32
  with open(os.path.join(folder, 'config.json'), 'w') as f:
    json.dump(config, f)
  with pytest.raises(RuntimeError, match='hidden_size=32'):
    llama_speed.write_checkpoint('tiny', str(tmp_path))


def test_the_whole_measurement_at_a_tiny_shape(tmp_path):
  pytest.importorskip('torch')
  pytest.importorskip('transformers')
  report = llama_speed.run(
      shapes=('tiny',), dtypes=('float32',), cache_dir=str(tmp_path),
      prompt_len=6, new_tokens=4, repeats=1, ks=(1, 2), step_repeats=1,
      progress=lambda _: None)
  (logits,) = report['logits']
  assert logits['relative_diff'] < 1e-5
  assert [row['system'] for row in report['greedy']] == [
      OURS, llama_speed.HF_DYNAMIC, llama_speed.HF_STATIC]
  for row in report['greedy']:
    assert row['same_tokens'] == 4  # Both sides, every token, in f32.
    assert row['tokens_per_s'] == pytest.approx(4 / row['wall_s'])
  (step,) = report['steps']
  assert step['t1_ms'] > 0 and step['t2_over_t1'] > 0
  assert step['floor_ms'] == pytest.approx(
      step['weights_mb'] / step['bandwidth_gb_s'])
  (target,) = report['targets']
  assert target['target'].startswith('tiny: greedy')
  llama_speed.write_report(report, str(tmp_path / 'out'))
  with open(tmp_path / 'out' / 'llama_speed.json') as f:
    assert json.load(f)['settings']['new_tokens'] == 4
  table = (tmp_path / 'out' / 'llama_speed.md').read_text()
  assert '| tiny ' in table and 't2_over_t1' in table
