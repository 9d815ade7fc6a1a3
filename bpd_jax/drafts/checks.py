"""The config's `drafts` section and its checks.

A refinement is written as a string so that it can be given on the command
line (`decoding.Refinement.from_spec`): 'RESCORER:p=P,t=T,w=W', e.g.
'ngram:p=4,t=4,w=0.3', 'neural:t=4'.
"""

from bpd_jax import decoding
from bpd_jax.infra import extras
from bpd_jax.infra import numeric
from bpd_jax.models import drafters
from bpd_jax.tasks.checks import at_least


def check(config, heads: int | None = None, vocab_size: int | None = None):
  """Checks config.drafts; raises ValueError naming the field and value."""
  if 'drafts' not in config:
    raise ValueError('the config has no `drafts` section (see '
                     'configs/demo.py).')
  extras.require()  # The job's figure, drawn at the end.
  d = config.drafts
  ks = tuple(d.ks)
  if not ks or not all(numeric.is_integer(k) and k >= 2 for k in ks):
    raise ValueError(f'drafts.ks={ks!r} must be integers >= 2.')
  if heads is not None and max(ks) > heads:
    raise ValueError(f'drafts.ks={ks} exceed the model\'s {heads} heads.')
  at_least(d, 'drafts', batch_size=1, repeats=1, ngram_order=1, lm_window=1,
           lm_steps=1, lm_d_model=1, lm_layers=1, num_examples=0,
           corpus_limit=0)
  top_ts = tuple(d.top_ts)
  if not top_ts or not all(numeric.is_integer(t) and t >= 1 for t in top_ts):
    raise ValueError(f'drafts.top_ts={top_ts!r} must be integers >= 1.')
  if vocab_size is not None and max(d.top_ts) > vocab_size:
    raise ValueError(f'drafts.top_ts={tuple(d.top_ts)} exceed the '
                     f'vocabulary size {vocab_size}.')
  if not isinstance(d.corpus, str) or not d.corpus:
    raise ValueError("drafts.corpus must be 'targets' or a file of target "
                     "sentences.")
  refinements = [decoding.Refinement.from_spec(spec, d.lm_window)
                 for spec in d.refinements]
  dependent = drafters.dependent(config.model.head_layer)
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
