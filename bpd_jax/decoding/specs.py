"""The options of a decoding spec string, as configs and flags give them.

Drafters, trees, refinements and samplers are named by short strings
('lookup:max=4,heads=tree', 'dynamic:64,top=4', 'ngram:p=4,t=4',
'temperature=0.7,top_k=50'): a head, then comma-separated key=value
options. Each value type parses its own head and reads its options here,
so that every spec refuses the same mistakes with the same words: an
unknown key, a key without a value, a key given twice (which one was
meant?), a value of the wrong type.
"""

# The words of the errors for each option type.
_TYPE_NAMES = {int: 'an integer', float: 'a number', str: 'a word'}


def options(spec: str, text: str, kinds: dict[str, type],
            what: str) -> dict:
  """`text`'s comma-separated 'key=value' items as {key: kind(value)}.

  Args:
    spec: the whole spec string, for the errors.
    text: its options ('' for none).
    kinds: each key it may give -> the type its value reads as (int,
      float or str).
    what: the spec's kind, for the errors ('drafter', 'sampler').

  Returns:
    {key: value} of the keys given.

  Raises:
    ValueError: naming the spec and the item: not key=value of a known
      key, a key given twice, or a value that is not of its key's type.
  """
  values = {}
  for item in filter(None, text.split(',')):
    key, _, value = item.partition('=')
    if key not in kinds or not value:
      raise ValueError(f'{what} {spec!r}: {item!r} is not one of '
                       f'{", ".join(name + "=" for name in kinds)}.')
    if key in values:
      raise ValueError(f'{what} {spec!r}: {key}= is given twice.')
    kind = kinds[key]
    try:
      values[key] = kind(value)
    except ValueError:
      raise ValueError(f'{what} {spec!r}: {key}={value!r} is not '
                       f'{_TYPE_NAMES[kind]}.') from None
  return values


def fields(spec: str, text: str, keys: dict[str, tuple[str, type]],
           what: str) -> dict:
  """As `options`, for keys that stand for a value type's fields:
  `keys` maps each key to (field, type); returns {field: value}."""
  given = options(spec, text, {key: kind for key, (_, kind) in keys.items()},
                  what)
  return {keys[key][0]: value for key, value in given.items()}
