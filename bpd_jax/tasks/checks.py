"""Helpers of the config checks: a bad field named with its value.

Integers are checked by `at_least`, other numbers by `number_in`: both
refuse bools, and `number_in` refuses NaN and the infinities (see
`bpd_jax/infra/numeric.py`).
"""

import math

from bpd_jax.infra import numeric


def at_least(section, name: str, **minimums) -> None:
  """Raises ValueError unless each field is an integer >= its minimum.

  Args:
    section: a ConfigDict section, e.g. config.train.
    name: its name in messages ('train').
    **minimums: field -> smallest allowed value.
  """
  for field, minimum in minimums.items():
    if field not in section:
      raise ValueError(f'{name}.{field} is missing: an integer >= {minimum}.')
    value = section[field]
    if not numeric.is_integer(value) or value < minimum:
      raise ValueError(f'{name}.{field}={value!r} must be an integer >= '
                       f'{minimum}.')


def number_in(section, name: str, field: str, low: float,
              high: float = math.inf, *, open_low: bool = False,
              open_high: bool = False, default=None) -> None:
  """Raises ValueError unless the field is a finite number in the range.

  Args:
    section, name: as `at_least`.
    field: the field's name in the section.
    low, high: the range's ends (high inf: no upper end).
    open_low, open_high: an end is excluded (e.g. a learning rate > 0).
    default: the value of a missing field (None: it must be there).
  """
  value = section.get(field, default)
  if value is None:
    raise ValueError(f'{name}.{field} is missing: a number '
                     f'{_range(low, high, open_low, open_high)}.')
  # is_finite first: a string or None has no order with numbers.
  if not (numeric.is_finite(value)
          and (value > low if open_low else value >= low)
          and (value < high if open_high else value <= high)):
    raise ValueError(f'{name}.{field}={value!r} must be a finite number '
                     f'{_range(low, high, open_low, open_high)}.')


def _range(low, high, open_low, open_high) -> str:
  """'> 0', '>= 0' or 'in (0, 1]' as messages write a range."""
  if high == math.inf:
    return f'{">" if open_low else ">="} {low:g}'
  return (f'in {"(" if open_low else "["}{low:g}, {high:g}'
          f'{")" if open_high else "]"}')


def needs_train_split(task, why: str) -> None:
  """Raises ValueError unless task.splits has a 'train' entry."""
  if 'train' not in task.splits:
    raise ValueError(f'task.splits={dict(task.splits)} needs a "train" '
                     f'entry: {why}.')


def eval_split(config, splits) -> None:
  """Raises ValueError unless eval.split is one of the task's `splits`:
  evaluation reads it only after training, so it is checked before (at
  the config check where a task's splits are fixed, else at its load).

  Args:
    config: the whole config.
    splits: the task's split names.
  """
  split = config.eval.split
  if split not in splits:
    raise ValueError(f'eval.split={split!r} is not a split of task '
                     f'{config.task.name!r}: one of {sorted(splits)}.')
