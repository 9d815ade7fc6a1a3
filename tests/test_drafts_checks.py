"""The config's drafts section."""

import pytest

from bpd_jax.drafts import checks

import train_configs


@pytest.mark.parametrize('name', ['demo', 'multi30k'])
def test_config_drafts_sections_are_valid(name):
  config = train_configs.load_config(name)
  refinements = checks.check(config, config.model.num_proposal_heads, 4000)
  assert len(refinements) == len(config.drafts.refinements)


def test_bad_fields_are_named():
  config = train_configs.load_config('demo')
  config.drafts.refinements = ('none:p=9,t=2',)
  with pytest.raises(ValueError, match='drafts=9 exceeds the 2\\^3'):
    checks.check(config, 8, 100)
  config = train_configs.load_config('demo')
  with pytest.raises(ValueError, match='exceed the model\'s 4 heads'):
    checks.check(config, 4, 100)
  config.drafts.lm_window = 0
  with pytest.raises(ValueError, match='drafts.lm_window=0'):
    checks.check(config)


@pytest.mark.parametrize('field,value,message', [
    ('ks', (True, 4), r'drafts.ks=\(True, 4\) must be integers >= 2'),
    ('top_ts', (1, True), r'drafts.top_ts=\(1, True\) must be integers >= 1'),
    ('repeats', True, 'drafts.repeats=True must be an integer >= 1'),
    ('num_examples', -1, 'drafts.num_examples=-1 must be an integer >= 0'),
])
def test_bools_and_negatives_are_named(field, value, message):
  config = train_configs.load_config('demo')
  config.drafts[field] = value
  with pytest.raises(ValueError, match=message):
    checks.check(config)
