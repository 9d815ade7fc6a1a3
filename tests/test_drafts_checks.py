"""Refinement specs and the config's drafts section."""

import pytest

from bpd_jax.drafts import checks

import train_configs


def test_parse_specs():
  r = checks.parse('ngram:p=4,t=3,w=0.25')
  assert (r.rescorer, r.drafts, r.top_t, r.weight) == ('ngram', 4, 3, 0.25)
  r = checks.parse('neural:t=4', window=6)
  assert (r.drafts, r.top_t, r.context) == (1, 4, 6)
  assert checks.parse('none').is_plain


@pytest.mark.parametrize('spec, message', [
    ('bigram:p=2', "rescorer 'bigram' is not one of"),
    ('ngram:q=2', "unknown option 'q'"),
    ('ngram:p=two', "p='two' is not int"),
    ('ngram:w=2', 'weight=2.0 must lie in'),
    ('none:p=0', 'drafts=0 must be an integer >= 1'),
])
def test_bad_specs(spec, message):
  with pytest.raises(ValueError, match=message):
    checks.parse(spec)


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
