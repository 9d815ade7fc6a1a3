"""Helpers of the config checks: a bad field named with its value."""


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
    if not isinstance(value, int) or value < minimum:
      raise ValueError(f'{name}.{field}={value!r} must be an integer >= '
                       f'{minimum}.')


def needs_train_split(task, why: str) -> None:
  """Raises ValueError unless task.splits has a 'train' entry."""
  if 'train' not in task.splits:
    raise ValueError(f'task.splits={dict(task.splits)} needs a "train" '
                     f'entry: {why}.')
