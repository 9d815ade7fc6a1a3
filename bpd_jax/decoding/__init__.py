"""Model-agnostic decoders: blockwise parallel decoding (k = 1: greedy).

Nothing here imports a model. A decoder receives a `DecodingFns`: plain
functions that extend a cache by n positions per example and map the
resulting features to logits. `bpd_jax.generate` wires a Transformer to them.

The ground floor holds the values a decode is described by, and nothing
that runs it: `types.py` (what a model gives and a decode returns),
`criteria.py`, `tree.Tree` (a tree of the heads' candidates verified in one
call), `refine.Refinement` (with `lattice.py`: the drafts picked from the
heads' top-t lattice with a rescorer), `lookup.Lookup` (drafts that need
no training: prompt lookup, an n-gram model), `sampler.Sampler`, and
`options.DecodeOptions`, the one description of a decode made of them,
with its checks. Above them: `steps.py`, the steps every loop shares;
`blockwise.py`, the argmax loop (k = 1: greedy decoding); `sampling.py`,
blockwise sampling that keeps the base model's distribution (k = 1:
ancestral sampling). Both loops take `(fns, cache, prompt, prompt_lengths,
options)`.
"""

from bpd_jax.decoding import sampling
from bpd_jax.decoding.blockwise import blockwise_decode
from bpd_jax.decoding.criteria import (Criterion, Distance, Exact, TopK,
                                      Typical, from_spec)
from bpd_jax.decoding.lookup import Lookup
from bpd_jax.decoding.options import DecodeOptions
from bpd_jax.decoding.refine import Refinement
from bpd_jax.decoding.sampler import Sampler
from bpd_jax.decoding.tree import DynamicTree, Tree
from bpd_jax.decoding.types import DecodeResult, DecodingFns

__all__ = ['Criterion', 'DecodeOptions', 'DecodeResult', 'DecodingFns',
           'Distance', 'DynamicTree', 'Exact', 'Lookup', 'Refinement', 'Sampler', 'TopK', 'Tree',
           'Typical',
           'blockwise_decode', 'from_spec', 'sampling']
