"""Flax NNX models. Nothing here imports a decoder."""

from bpd_jax.models.heads import ProposalHeads
from bpd_jax.models.positions import ImagePositions
from bpd_jax.models.transformer import (DecodeCache, Transformer,
                                        TransformerConfig)

__all__ = ['DecodeCache', 'ImagePositions', 'ProposalHeads', 'Transformer',
           'TransformerConfig']
