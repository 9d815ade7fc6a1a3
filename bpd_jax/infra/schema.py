"""A field table: what values each field of a config takes, checked once.

    FIELDS = {'d_model': schema.integer(1),
              'dropout_rate': schema.number(0, 1, open_high=True),
              'norm': schema.choice(('layer', 'rms'))}
    schema.check(FIELDS, values, section='model')

Each `Field` holds one field's limits; `check` refuses the first value
outside them with a one-line ValueError naming `section.field=value` and the
limit (`model.d_model=0 must be an integer >= 1.`). Checks that relate
several fields are the caller's code. Numbers follow `numeric`: a bool is
no integer, NaN and the infinities are no number.
"""

import dataclasses
import math
from typing import Mapping

from bpd_jax.infra import numeric


@dataclasses.dataclass(frozen=True)
class Field:
  """The values one field takes.

  Attributes:
    kind: 'integer', 'number' (finite int or float), 'bool', 'choice' or
      'instance' (of `type_`).
    low, high: an integer's or a number's range (inf: no upper end).
    open_low, open_high: an end is excluded (e.g. a rate > 0).
    choices: a 'choice' field's values.
    type_: an 'instance' field's class; type_name how messages name it.
    optional: None is a value too (`hint` says what it means).
    hint: said after the limit in a message, e.g. '(or None for d_ff)'.
  """
  kind: str
  low: float = -math.inf
  high: float = math.inf
  open_low: bool = False
  open_high: bool = False
  choices: tuple = ()
  type_: type | None = None
  type_name: str = ''
  optional: bool = False
  hint: str = ''

  def accepts(self, value) -> bool:
    """Whether `value` is within this field's limits."""
    if value is None and self.optional:
      return True
    if self.kind == 'integer':
      return numeric.is_integer(value) and self._in_range(value)
    if self.kind == 'number':
      # is_finite first: a string or None has no order with numbers.
      return numeric.is_finite(value) and self._in_range(value)
    if self.kind == 'bool':
      return isinstance(value, bool)
    if self.kind == 'choice':
      return value in self.choices
    return isinstance(value, self.type_)

  def expected(self) -> str:
    """What a value must be: 'an integer >= 1', 'one of (...)'."""
    if self.kind == 'integer':
      return f'an integer {self._range()}'
    if self.kind == 'number':
      return f'a finite number {self._range()}'
    if self.kind == 'bool':
      return 'a bool'
    if self.kind == 'choice':
      return f'one of {self.choices}'
    return f'None or a {self.type_name}'

  def refusal(self) -> str:
    """What a message says after a refused value."""
    if self.kind == 'choice':
      return f'is not {self.expected()}'
    return f'must be {self.expected()}'

  def _in_range(self, value) -> bool:
    return ((value > self.low if self.open_low else value >= self.low)
            and (value < self.high if self.open_high else value <= self.high))

  def _range(self) -> str:
    """'>= 1', '> 0' or 'in [0, 1)' as messages write a range."""
    if self.high == math.inf:
      return f'{">" if self.open_low else ">="} {self.low:g}'
    return (f'in {"(" if self.open_low else "["}{self.low:g}, '
            f'{self.high:g}{")" if self.open_high else "]"}')


def integer(low: int, *, optional: bool = False, hint: str = '') -> Field:
  """An integer >= low (not a bool)."""
  return Field('integer', low=low, optional=optional, hint=hint)


def number(low: float, high: float = math.inf, *, open_low: bool = False,
           open_high: bool = False) -> Field:
  """A finite int or float in [low, high] (ends excluded where open)."""
  return Field('number', low=low, high=high, open_low=open_low,
               open_high=open_high)


def flag() -> Field:
  """True or False (not 0 or 1)."""
  return Field('bool')


def choice(choices) -> Field:
  """One of `choices`."""
  return Field('choice', choices=tuple(choices))


def instance(type_: type, type_name: str) -> Field:
  """None or an instance of `type_` (named `type_name` in messages)."""
  return Field('instance', type_=type_, type_name=type_name, optional=True)


def problem(table: Mapping[str, Field], values: Mapping,
            section: str = '') -> str | None:
  """The first field of `table` whose value is outside its limits, said in
  one line; None when every one is within them.

  Args:
    table: field name -> Field, checked in its order.
    values: field name -> value (a dict, a ConfigDict section, a
      dataclass's vars()).
    section: the prefix of names in messages ('train' -> 'train.x').
  """
  prefix = f'{section}.' if section else ''
  for name, field in table.items():
    hint = f' {field.hint}' if field.hint else ''
    if name not in values:
      return f'{prefix}{name} is missing: {field.expected()}{hint}.'
    value = values[name]
    if not field.accepts(value):
      return f'{prefix}{name}={value!r} {field.refusal()}{hint}.'
  return None


def check(table: Mapping[str, Field], values: Mapping,
          section: str = '') -> None:
  """Raises ValueError with `problem`'s line, if there is one."""
  message = problem(table, values, section)
  if message:
    raise ValueError(message)
