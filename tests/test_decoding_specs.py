"""The options of a spec string: one reader, the same refusals for every
kind of spec."""

import pytest

from bpd_jax.decoding import specs

KINDS = {'top': int, 'temperature': float, 'heads': str}


def test_options_read_as_their_types():
  assert specs.options('dynamic:8,top=4,temperature=0.5',
                       'top=4,temperature=0.5', KINDS, 'tree') == {
                           'top': 4, 'temperature': 0.5}
  assert specs.options('lookup:heads=tree', 'heads=tree', KINDS,
                       'drafter') == {'heads': 'tree'}
  assert specs.options('dynamic:8', '', KINDS, 'tree') == {}


@pytest.mark.parametrize('text,message', [
    ('wide=2', "^tree 'S': 'wide=2' is not one of top=, temperature=, "
     r'heads=\.$'),
    ('top', "'top' is not one of"),  # No '='.
    ('top=', "'top=' is not one of"),  # No value.
    ('top=2,top=3', r'^tree .S.: top= is given twice\.$'),
    ('top=2.5', r"top='2\.5' is not an integer\.$"),
    ('temperature=warm', r"temperature='warm' is not a number\.$"),
])
def test_mistakes_are_named_with_the_spec(text, message):
  with pytest.raises(ValueError, match=message):
    specs.options('S', text, KINDS, 'tree')


def test_fields_name_the_value_types_fields():
  keys = {'p': ('drafts', int), 'w': ('weight', float)}
  assert specs.fields('ngram:p=4,w=0.5', 'p=4,w=0.5', keys,
                      'refinement') == {'drafts': 4, 'weight': 0.5}
