"""Peak memory of a decode, from the program the Decoder runs."""

import contextlib
import logging

import jax
import numpy as np
from flax import nnx

from bpd_jax import generate
from bpd_jax import timing
from bpd_jax.bench import memory
from bpd_jax.decoding import DecodeOptions
from bpd_jax.models import Transformer, TransformerConfig


def test_memory_counts_every_parameter_and_grows_with_k(caplog):
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
  # The program measured is the one decode runs, and timing its loop
  # (forced iterations) runs it too: after one decode neither compiles.
  options = DecodeOptions(max_len=10, k=4)
  decoder.decode(inputs, options)
  with compile_log(caplog):
    memory.peak_bytes(decoder, inputs, options)
    timing.loop_iteration_seconds(decoder, options, *inputs.shape, repeats=1)
    decoder.decode(inputs, options)
  assert not compiles(caplog)


@contextlib.contextmanager
def compile_log(caplog):
  """Records JAX's one line per XLA compilation."""
  with jax.log_compiles(True), caplog.at_level(logging.WARNING):
    caplog.clear()
    yield


def compiles(caplog) -> list[str]:
  return [r.getMessage() for r in caplog.records
          if 'Finished XLA compilation' in r.getMessage()]
