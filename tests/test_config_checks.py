"""Config checks: a bad field stops before any work, named with its value."""

import pytest

from bpd_jax import config_checks

from train_configs import demo_config


def test_demo_configs_pass():
  config_checks.check(demo_config())
  config_checks.check(demo_config('quick'))
  config_checks.check(demo_config('distilled=/tmp/x'))


@pytest.mark.parametrize('section,field,value,message', [
    ('train', 'batch_size', 0, 'train.batch_size=0 must be an integer >= 1'),
    ('train', 'learning_rate', 0.0, 'train.learning_rate=0.0 must be > 0'),
    ('train', 'label_smoothing', 1.0, r'train.label_smoothing=1.0 must be in'),
    ('train', 'clip_norm', -1.0, 'train.clip_norm=-1.0 must be >= 0'),
    ('train', 'head1_weight', 1.0, r'train.head1_weight=1.0 must be in'),
    ('train', 'warmup_steps', 0, 'train.warmup_steps=0'),
    ('eval', 'ks', (2, 9), r'eval.ks: k=9 must be an integer in \[1, 8\]'),
    ('eval', 'min_block', 3, r'eval.min_block=3 must be in \[1, 2\]'),
    ('eval', 'criterion', 'top3', "criterion 'top3' is not"),
    ('eval', 'max_len', 45, 'eval.max_len=45 with k up to 8 needs 53 decoder '
     'positions; model.max_target_len=48'),
    ('model', 'dropout_rate', 2.0, r'dropout_rate=2.0 must be in \[0, 1\)'),
    ('model', 'size', 'huge', "unknown model size 'huge'"),
    ('task', 'name', 'wmt', "task.name='wmt' is not one of"),
    ('task', 'max_source_len', 1, 'task.max_source_len=1'),
    ('task', 'max_source_len', 40, 'task.max_source_len=40 exceeds '
     'model.max_source_len=32'),
    ('task', 'max_target_len', 49, 'task.max_target_len=49 exceeds '
     'model.max_target_len=48'),
    ('mesh', 'data_axis', 'rows', "mesh.data_axis='rows' is not one of"),
    ('mesh', 'shape', (2, 2), 'differ in length'),
])
def test_bad_fields(section, field, value, message):
  config = demo_config()
  config[section][field] = value
  with pytest.raises(ValueError, match=message):
    config_checks.check(config)


def test_missing_section():
  config = demo_config()
  del config['eval']
  with pytest.raises(ValueError, match="no 'eval' section"):
    config_checks.check(config)
