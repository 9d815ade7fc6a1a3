"""The Transformer's encoder and decoder layers, built from its config.

Each layer is self-attention (models/attention.py), cross-attention in an
encoder-decoder's decoder, and a feed-forward layer (feed_forward.py),
each inside a `Sublayer`: residual connection, dropout and a norm
(norms.py) before (pre_norm) or after it. Which attention, norm and
feed-forward a layer has is read from the config's fields alone.
"""

import jax.numpy as jnp
from flax import nnx

from bpd_jax.models import attention
from bpd_jax.models import dropout as dropout_lib
from bpd_jax.models import feed_forward as feed_forward_lib
from bpd_jax.models import norms
from bpd_jax.models.transformer_config import TransformerConfig


def linear_kwargs(config: TransformerConfig, rngs: nnx.Rngs) -> dict:
  """The dtypes and randomness of every projection of the model."""
  return dict(dtype=jnp.dtype(config.dtype),
              param_dtype=jnp.dtype(config.param_dtype), rngs=rngs)


def norm(config: TransformerConfig, rngs: nnx.Rngs):
  """A norm of config.norm's kind over d_model features."""
  return norms.make(config.norm, config.d_model,
                    epsilon=config.layer_norm_epsilon,
                    dtype=jnp.dtype(config.dtype),
                    param_dtype=jnp.dtype(config.param_dtype), rngs=rngs)


def _attention_kwargs(config: TransformerConfig, rngs: nnx.Rngs) -> dict:
  return dict(num_kv_heads=config.num_kv_heads, head_dim=config.head_dim,
              qkv_bias=config.qkv_bias, out_bias=config.out_bias,
              **linear_kwargs(config, rngs))


def _feed_forward(config: TransformerConfig, rngs: nnx.Rngs):
  return feed_forward_lib.FeedForward(
      config.d_model, config.d_ff, kind=config.feed_forward,
      activation=config.activation, use_bias=config.ffn_bias,
      dropout_rate=config.dropout_rate, **linear_kwargs(config, rngs))


class Sublayer(nnx.Module):
  """Residual connection, dropout and norm (pre- or post-) around f."""

  def __init__(self, config: TransformerConfig, *, rngs: nnx.Rngs):
    self.pre_norm = config.pre_norm
    self.norm = norm(config, rngs)
    self.dropout = nnx.Dropout(config.dropout_rate)

  def __call__(self, x, f, dropout_rngs):
    if self.pre_norm:
      return x + dropout_lib.apply(self.dropout, f(self.norm(x)),
                                   dropout_rngs)
    return self.norm(x + dropout_lib.apply(self.dropout, f(x), dropout_rngs))


class EncoderLayer(nnx.Module):
  """Bidirectional self-attention and feed-forward."""

  def __init__(self, config: TransformerConfig, *, rngs: nnx.Rngs):
    self.attention = attention.SelfAttention(
        config.d_model, config.num_heads, rotary=config.rotary,
        **_attention_kwargs(config, rngs))
    self.attention_sublayer = Sublayer(config, rngs=rngs)
    self.ffn = _feed_forward(config, rngs)
    self.ffn_sublayer = Sublayer(config, rngs=rngs)

  def __call__(self, x, mask, dropout_rngs):
    """[batch, length, d_model] at positions 0 .. length - 1 -> the same;
    mask: [batch, 1, 1, length] the valid source positions."""
    x = self.attention_sublayer(x, lambda y: self.attention(y, mask),
                                dropout_rngs)
    return self.ffn_sublayer(x, lambda y: self.ffn(y, dropout_rngs),
                             dropout_rngs)


class DecoderLayer(nnx.Module):
  """Causal self-attention, cross-attention (encoder-decoder only), FFN."""

  def __init__(self, config: TransformerConfig, *, rngs: nnx.Rngs):
    self.attention = attention.SelfAttention(
        config.d_model, config.num_heads, rotary=config.rotary,
        **_attention_kwargs(config, rngs))
    self.attention_sublayer = Sublayer(config, rngs=rngs)
    if config.is_encoder_decoder:
      self.cross_attention = attention.CrossAttention(
          config.d_model, config.num_heads,
          **_attention_kwargs(config, rngs))
      self.cross_sublayer = Sublayer(config, rngs=rngs)
    self.ffn = _feed_forward(config, rngs)
    self.ffn_sublayer = Sublayer(config, rngs=rngs)

  def __call__(self, x, self_attend, memory, memory_valid, dropout_rngs):
    """One layer, with the self-attention supplied by the caller.

    Args:
      x: [batch, n, d_model].
      self_attend: (attention module, normalised x) -> [batch, n, d_model];
        full causal attention in training, cached `extend` in decoding.
      memory: this layer's projected encoder output, or None.
      memory_valid: [batch, source_length] bool, or None.
      dropout_rngs: nnx.Rngs for dropout, or None for none.
    """
    x = self.attention_sublayer(x, lambda y: self_attend(self.attention, y),
                                dropout_rngs)
    if memory is not None:
      x = self.cross_sublayer(
          x, lambda y: self.cross_attention(y, memory, memory_valid),
          dropout_rngs)
    return self.ffn_sublayer(x, lambda y: self.ffn(y, dropout_rngs),
                             dropout_rngs)
