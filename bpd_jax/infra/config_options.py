"""`:key=value,...` options of config files (`--config=configs/x.py:k=4`).

    def get_config(arg=None):
      options = config_options.parse(arg, size='small', k=8)

Values are converted to the type of their default; an unknown key or a value
of the wrong type (a float that is NaN or infinite too) stops with a message
naming it before any work starts.
`sibling` loads a config file's shared base (configs/base.py).
"""

import importlib.util
import math
import os


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
      if isinstance(default, float) and not math.isfinite(options[key]):
        raise ValueError(f'config option {key}={value!r} is not a finite '
                         f'number.')
  return options


def check_choice(options: dict, name: str, choices) -> None:
  """Raises ValueError unless options[name] is one of `choices`."""
  if options[name] not in choices:
    raise ValueError(f'config option {name}={options[name]!r} is not one of '
                     f'{tuple(choices)}.')


def layers(value: str) -> tuple[int, ...]:
  """'0+2' -> (0, 2): a list of layers in one option ('': none)."""
  try:
    return tuple(int(part) for part in value.split('+') if part)
  except ValueError:
    raise ValueError(f'config option value {value!r} is not layer numbers '
                     f"joined by '+' (e.g. 0+2).") from None


def sibling(config_file: str, name: str):
  """The config module NAME.py in the directory of `config_file`.

  Config files are loaded by path (config_flags, the tests), not imported
  from a package, so an experiment config reaches the shared base as
  `base = config_options.sibling(__file__, 'base')`.
  """
  path = os.path.join(os.path.dirname(os.path.abspath(config_file)),
                      f'{name}.py')
  spec = importlib.util.spec_from_file_location(f'bpd_jax_configs_{name}',
                                                path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module
