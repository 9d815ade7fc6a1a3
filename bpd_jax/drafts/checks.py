"""The config's `drafts` section and its checks.

A refinement is written as a string so that it can be given on the command
line (`decoding.Refinement.from_spec`): 'RESCORER:p=P,t=T,w=W', e.g.
'ngram:p=4,t=4,w=0.3', 'neural:t=4'.
"""

from bpd_jax import decoding
from bpd_jax.models import heads as heads_lib


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
  refinements = [decoding.Refinement.from_spec(spec, d.lm_window)
                 for spec in d.refinements]
  dependent = heads_lib.dependent(config.model.head_layer)
  for refinement in refinements:
    for k in ks:
      try:
        decoding.DecodeOptions(max_len=1, k=k, refinement=refinement).check(
            heads or k, vocab_size or refinement.top_t, dependent)
      except ValueError as error:
        more = ' (set --config.drafts.refinements=())' if dependent else ''
        raise ValueError(f'drafts.refinements={tuple(d.refinements)}: '
                         f'{error}{more}') from error
  return refinements
