"""The config's `drafts` section: refinement specs and their checks.

A refinement is written as a string so that it can be given on the command
line: 'RESCORER:p=P,t=T,w=W' with RESCORER one of none, ngram, neural;
p drafts verified per call, t tokens per head, w the rescorer's weight
(defaults p=1, t=1, w=0.5). E.g. 'ngram:p=4,t=4,w=0.3', 'neural:t=4'.
"""

from bpd_jax.decoding import refine

_KEYS = {'p': ('drafts', int), 't': ('top_t', int), 'w': ('weight', float)}


def parse(spec: str, window: int = 0) -> refine.Refinement:
  """A Refinement from its spec; `window` is the neural rescorer's."""
  name, _, options = spec.partition(':')
  values = {}
  for item in filter(None, options.split(',')):
    key, _, value = item.partition('=')
    if key not in _KEYS:
      raise ValueError(f'refinement {spec!r}: unknown option {key!r} (p, t '
                       f'or w).')
    field, kind = _KEYS[key]
    try:
      values[field] = kind(value)
    except ValueError as error:
      raise ValueError(f'refinement {spec!r}: {key}={value!r} is not '
                       f'{kind.__name__}.') from error
  try:
    return refine.Refinement(rescorer=name,
                             context=window if name == 'neural' else 0,
                             **values)
  except ValueError as error:
    raise ValueError(f'refinement {spec!r}: {error}') from error


def check(config, heads: int | None = None, vocab_size: int | None = None):
  """Checks config.drafts; raises ValueError naming the field and value."""
  if 'drafts' not in config:
    raise ValueError('the config has no `drafts` section (see '
                     'configs/demo.py).')
  d = config.drafts
  ks = tuple(d.ks)
  if not ks or any(not isinstance(k, int) or k < 2 for k in ks):
    raise ValueError(f'drafts.ks={ks} must be integers >= 2.')
  if heads is not None and max(ks) > heads:
    raise ValueError(f'drafts.ks={ks} exceed the model\'s {heads} heads.')
  for name in ('batch_size', 'repeats', 'ngram_order', 'lm_window',
               'lm_steps', 'lm_d_model', 'lm_layers'):
    if not isinstance(d[name], int) or d[name] < 1:
      raise ValueError(f'drafts.{name}={d[name]!r} must be an integer >= 1.')
  if d.num_examples < 0 or d.corpus_limit < 0:
    raise ValueError('drafts.num_examples and drafts.corpus_limit must be '
                     '>= 0 (0: all).')
  if not d.top_ts or min(d.top_ts) < 1:
    raise ValueError(f'drafts.top_ts={tuple(d.top_ts)} must be integers '
                     f'>= 1.')
  if vocab_size is not None and max(d.top_ts) > vocab_size:
    raise ValueError(f'drafts.top_ts={tuple(d.top_ts)} exceed the '
                     f'vocabulary size {vocab_size}.')
  if not isinstance(d.corpus, str) or not d.corpus:
    raise ValueError("drafts.corpus must be 'targets' or a file of target "
                     "sentences.")
  refinements = [parse(spec, d.lm_window) for spec in d.refinements]
  for refinement in refinements:
    for k in ks:
      refinement.check(k, vocab_size or refinement.top_t)
  return refinements
