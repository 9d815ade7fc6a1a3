"""Language models that rescore the heads' drafts (Kim et al. 2024).

A refinement (`decoding.Refinement`) names its rescorer: 'none' (the heads'
own scores), 'ngram' (`ngram.NgramModel`, an interpolated Kneser-Ney model
looked up on device) or 'neural' (`neural`: a small decoder-only
Transformer over a window of the output). Each rescorer module has the same
two functions, the protocol the decoder relies on:

- `bind(refinement, model, vocab_size=, start_id=)` -> (refinement
  completed from the model, e.g. its context length; the device arrays the
  compiled decode takes as arguments; a hashable static structure), after
  checking the model against the decoded model's vocabulary;
- `function(structure, arguments)` -> the `decoding.refine.Rescore`
  function, built inside the compiled decode.
"""

import dataclasses

from bpd_jax.rescorers import neural
from bpd_jax.rescorers import ngram

_MODULES = {'ngram': ngram, 'neural': neural}


def bind(refinement, model, *, vocab_size: int, start_id: int):
  """(refinement, arguments, structure) for a decode; see the docstring.

  Args:
    refinement: the `decoding.Refinement` of the decode.
    model: its rescorer's model (None for rescorer 'none').
    vocab_size: the decoded model's vocabulary.
    start_id: the token before an output's first (the decoder's bos).

  Raises:
    ValueError: a model that does not fit the refinement or the vocabulary.
  """
  if refinement.rescorer == 'none':
    if model is not None:
      raise ValueError("rescorer 'none' takes no rescorer model.")
    return dataclasses.replace(refinement, context=0), None, None
  return _MODULES[refinement.rescorer].bind(
      refinement, model, vocab_size=vocab_size, start_id=start_id)


def function(refinement, structure, arguments):
  """The refinement's `Rescore` inside the compiled decode (None: 'none')."""
  if refinement is None or refinement.rescorer == 'none':
    return None
  return _MODULES[refinement.rescorer].function(structure, arguments)
