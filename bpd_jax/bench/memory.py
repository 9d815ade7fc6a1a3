"""Peak memory of a decode, read from the compiled program it runs."""

import jax
import numpy as np
from flax import nnx

from bpd_jax import decoding
from bpd_jax.infra import sharding


def peak_bytes(decoder, inputs, options: decoding.DecodeOptions) -> int:
  """The whole model, its decoding layout and the program's buffers, in
  bytes on the most loaded device (on a mesh, what the rules put there).

  Lowers the decoder's own program for this input shape
  (`generate.Decoder.lower`: the one `decode` runs) and reads XLA's memory
  analysis (outputs and temporaries), plus every parameter of the model
  (XLA leaves out the ones a program does not read, such as greedy
  decoding's proposal heads, but they are in memory all the same), the
  output weights the Decoder laid out for this block size, and the inputs.

  Args:
    decoder: a `generate.Decoder`.
    inputs: [batch, length] token ids of the decode's shape.
    options: the decode's options (plain drafts).
  """
  stats = decoder.lower(inputs, options).compile().memory_analysis()
  held = jax.tree.leaves((nnx.state(decoder.model),
                          decoder.layout(options.k)))
  # XLA's figures are one device's.
  return int(max(sharding.device_bytes(held).values())
             + np.asarray(inputs).nbytes + stats.output_size_in_bytes
             + stats.temp_size_in_bytes)
