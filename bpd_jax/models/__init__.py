"""Flax NNX models. Nothing here imports a decoder."""

from bpd_jax.models.positions import ImagePositions
from bpd_jax.models.rotary import RopeScaling
from bpd_jax.models.transformer import DecodeCache, Transformer
from bpd_jax.models.transformer_config import TransformerConfig

__all__ = ['DecodeCache', 'ImagePositions', 'RopeScaling', 'Transformer',
           'TransformerConfig']
