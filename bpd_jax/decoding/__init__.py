"""Model-agnostic decoders: greedy and blockwise parallel decoding.

Nothing here imports a model. A decoder receives a `DecodingFns`: plain
functions that extend a cache by n positions per example and map the
resulting features to logits. `bpd_jax.generate` wires a Transformer to them.
`refine.Refinement` (with `lattice.py`) makes the blockwise decoder verify
several drafts per call, picked from the heads' top-t lattice.
`DecodeOptions` describes one decode (decoder, k, criterion, min_block,
refinement) and holds the checks of those options.
"""

from bpd_jax.decoding.blockwise import blockwise_decode
from bpd_jax.decoding.criteria import (Criterion, Distance, Exact, TopK,
                                      from_spec)
from bpd_jax.decoding.greedy import greedy_decode
from bpd_jax.decoding.options import DecodeOptions
from bpd_jax.decoding.refine import Refinement
from bpd_jax.decoding.types import DecodeResult, DecodingFns

__all__ = ['Criterion', 'DecodeOptions', 'DecodeResult', 'DecodingFns', 'Distance', 'Exact',
           'Refinement', 'TopK', 'blockwise_decode', 'from_spec',
           'greedy_decode']
