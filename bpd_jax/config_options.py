"""`:key=value,...` options of config files (`--config=configs/x.py:k=4`).

    def get_config(arg=None):
      options = config_options.parse(arg, size='small', k=8)

Values are converted to the type of their default; an unknown key or a value
of the wrong type stops with a message naming it before any work starts.
"""


def parse(arg: str | None, **defaults) -> dict:
  """Returns `defaults` updated from 'key=value,key=value' (or 'key')."""
  options = dict(defaults)
  for item in filter(None, (arg or '').split(',')):
    key, has_value, value = item.partition('=')
    key = key.strip()
    if key not in defaults:
      raise ValueError(f'unknown config option {key!r}; options: '
                       f'{", ".join(sorted(defaults))}.')
    default = defaults[key]
    if not has_value:
      if not isinstance(default, bool):
        raise ValueError(f'config option {key!r} needs a value ({key}=...).')
      options[key] = True
    elif isinstance(default, bool):
      if value.lower() not in ('true', 'false', '1', '0'):
        raise ValueError(f'config option {key}={value!r} is not a boolean.')
      options[key] = value.lower() in ('true', '1')
    else:
      try:
        options[key] = type(default)(value)
      except ValueError:
        raise ValueError(f'config option {key}={value!r} is not of type '
                         f'{type(default).__name__}.') from None
  return options
