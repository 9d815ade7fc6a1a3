"""Tests of bpd_jax/infra/schema.py: a field table and its one-line errors."""

import numpy as np
import pytest

from bpd_jax.infra import schema

TABLE = {
    'steps': schema.integer(1),
    'layers': schema.integer(0, hint='(0: none)'),
    'width': schema.integer(1, optional=True, hint='(or None for d_ff)'),
    'rate': schema.number(0, 1, open_low=True),
    'decay': schema.number(0),
    'frozen': schema.flag(),
    'norm': schema.choice(('layer', 'rms')),
    'scaling': schema.instance(complex, 'complex number'),
}
GOOD = dict(steps=3, layers=0, width=None, rate=1.0, decay=0, frozen=True,
            norm='rms', scaling=None)


def test_values_within_their_limits_pass():
  assert schema.problem(TABLE, GOOD) is None
  numpy_values = dict(GOOD, steps=np.int32(2), rate=np.float32(0.5),
                      width=7, scaling=1j)
  schema.check(TABLE, numpy_values, section='train')


@pytest.mark.parametrize('field,value,message', [
    ('steps', 0, 'train.steps=0 must be an integer >= 1.'),
    ('steps', True, 'train.steps=True must be an integer >= 1.'),
    ('steps', 2.0, 'train.steps=2.0 must be an integer >= 1.'),
    ('layers', -1, 'train.layers=-1 must be an integer >= 0 (0: none).'),
    ('width', 0, 'train.width=0 must be an integer >= 1 (or None for d_ff).'),
    ('rate', 0.0, 'train.rate=0.0 must be a finite number in (0, 1].'),
    ('rate', float('nan'), 'train.rate=nan must be a finite number in (0, '
     '1].'),
    ('rate', '0.5', "train.rate='0.5' must be a finite number in (0, 1]."),
    ('decay', float('inf'), 'train.decay=inf must be a finite number >= 0.'),
    ('decay', None, 'train.decay=None must be a finite number >= 0.'),
    ('frozen', 1, 'train.frozen=1 must be a bool.'),
    ('norm', 'batch', "train.norm='batch' is not one of ('layer', 'rms')."),
    ('scaling', 2.0, 'train.scaling=2.0 must be None or a complex number.'),
])
def test_a_bad_value_is_named_with_its_limit(field, value, message):
  values = dict(GOOD, **{field: value})
  assert schema.problem(TABLE, values, section='train') == message
  with pytest.raises(ValueError) as error:
    schema.check(TABLE, values, section='train')
  assert str(error.value) == message


def test_a_missing_field_says_what_it_must_be():
  values = {k: v for k, v in GOOD.items() if k != 'rate'}
  assert schema.problem(TABLE, values, section='eval') == (
      'eval.rate is missing: a finite number in (0, 1].')


def test_the_first_bad_field_in_table_order_is_named():
  values = dict(GOOD, norm='batch', steps=0)
  assert schema.problem(TABLE, values).startswith('steps=0 ')
