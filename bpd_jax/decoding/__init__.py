"""Model-agnostic decoders: blockwise parallel decoding (k = 1: greedy).

Nothing here imports a model. A decoder receives a `DecodingFns`: plain
functions that extend a cache by n positions per example and map the
resulting features to logits. `bpd_jax.generate` wires a Transformer to them.
`tree.Tree` makes the blockwise decoder verify a tree of the heads'
candidates in one call; `refine.Refinement` (with `lattice.py`) picks the
drafts from the heads' top-t lattice with a rescorer, verified as a tree.
`sampling.py` samples instead of taking the argmax: blockwise sampling that
keeps the base model's distribution (k = 1: ancestral sampling).
`DecodeOptions` describes one decode (k, criterion, min_block, refinement,
sampler, tree) and holds the checks of those options.
"""

from bpd_jax.decoding import sampling
from bpd_jax.decoding.blockwise import blockwise_decode
from bpd_jax.decoding.criteria import (Criterion, Distance, Exact, TopK,
                                      Typical, from_spec)
from bpd_jax.decoding.options import DecodeOptions
from bpd_jax.decoding.refine import Refinement
from bpd_jax.decoding.sampling import Sampler
from bpd_jax.decoding.tree import Tree
from bpd_jax.decoding.types import DecodeResult, DecodingFns

__all__ = ['Criterion', 'DecodeOptions', 'DecodeResult', 'DecodingFns',
           'Distance', 'Exact', 'Refinement', 'Sampler', 'TopK', 'Tree',
           'Typical',
           'blockwise_decode', 'from_spec', 'sampling']
