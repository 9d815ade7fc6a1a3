"""Peak memory of a decode, from the program the Decoder runs."""

import jax
import numpy as np
from flax import nnx

from bpd_jax import generate
from bpd_jax.bench import memory
from bpd_jax.decoding import DecodeOptions
from bpd_jax.models import Transformer, TransformerConfig


def test_memory_counts_every_parameter_and_grows_with_k():
  config = TransformerConfig(
      vocab_size=7, d_model=16, d_ff=32, num_heads=2, num_encoder_layers=1,
      num_decoder_layers=1, dropout_rate=0.0, max_source_len=8,
      max_target_len=24, num_proposal_heads=4)
  decoder = generate.Decoder(Transformer(config, rngs=nnx.Rngs(0)))
  inputs = np.random.default_rng(0).integers(3, 7, (2, 6)).astype(np.int32)
  parameters = sum(x.nbytes for x in jax.tree.leaves(nnx.state(
      decoder.model)))
  greedy = memory.peak_bytes(decoder, inputs, DecodeOptions(max_len=10))
  blockwise = memory.peak_bytes(decoder, inputs,
                                DecodeOptions(max_len=10, k=4))
  assert parameters < greedy < blockwise
  # The program measured is the one decode runs: lowering compiles nothing
  # the decode would not reuse, and decoding after it compiles nothing new.
  decoder.decode(inputs, DecodeOptions(max_len=10, k=4))
  compiled = decoder.compilations()
  decoder.decode(inputs, DecodeOptions(max_len=10, k=4))
  assert decoder.compilations() == compiled
