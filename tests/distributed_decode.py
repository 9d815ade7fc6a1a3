"""One process of a sharded decode over two processes
(tests/test_infra_distributed.py), and the model and inputs it decodes.

    python tests/distributed_decode.py OUT.npz

Run as each of two processes (JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES,
JAX_PROCESS_ID set; 4 simulated CPU devices each): joins the job, builds
`case()`'s model, decodes its inputs as each of DECODES says on a (2, 4)
('data', 'model') mesh over all 8 devices with the 'tensor' rules, and
process 0 writes each decode's tokens [batch, max_len], gathered from both
processes, to OUT.npz (one array per name of DECODES), with
param_fraction: the parameter bytes its most loaded device holds over
the whole model's.
"""

import sys

import jax
import numpy as np
from flax import nnx
from jax.experimental import multihost_utils

from bpd_jax import generate
from bpd_jax.decoding import DecodeOptions
from bpd_jax.infra import distributed
from bpd_jax.infra import sharding
from bpd_jax.models import Transformer, TransformerConfig

DECODES = {'greedy': DecodeOptions(max_len=12),
           'blockwise': DecodeOptions(max_len=12, k=4)}


def case():
  """(model, inputs [8, 5]): a float64 decoder-only Transformer whose
  heads, hidden units and vocabulary split over 4 devices (float64: the
  split sums' other order flips no near-tie), and right-padded inputs of
  different lengths. Call inside jax.enable_x64."""
  config = TransformerConfig(
      vocab_size=64, d_model=32, d_ff=64, num_heads=8, num_encoder_layers=0,
      num_decoder_layers=2, dropout_rate=0.0, max_target_len=64,
      tie_output=False, num_proposal_heads=4, head_hidden=32,
      dtype='float64', param_dtype='float64')
  model = Transformer(config, rngs=nnx.Rngs(3))
  rng = np.random.default_rng(5)
  tokens = rng.integers(3, config.vocab_size, (8, 5))
  lengths = rng.integers(1, 6, 8)
  inputs = np.where(np.arange(5) < lengths[:, None], tokens, config.pad_id)
  return model, inputs.astype(np.int32)


def main(path: str) -> None:
  distributed.initialize()
  with jax.enable_x64(True):
    model, inputs = case()
    mesh = sharding.make_mesh((2, 4), ('data', 'model'))
    decoder = generate.Decoder(model, mesh=mesh, param_rules='tensor')
    state = nnx.state(decoder.model)
    whole = sum(leaf.nbytes for leaf in jax.tree.leaves(state))
    # What the most loaded device holds, of the whole parameters.
    out = dict(param_fraction=max(sharding.device_bytes(state).values())
               / whole)
    for name, options in DECODES.items():
      # Each process holds its own rows: gathered into the whole batch.
      out[name] = multihost_utils.process_allgather(
          decoder.decode(inputs, options).tokens, tiled=True)
  if jax.process_index() == 0:
    np.savez(path, **out)


if __name__ == '__main__':
  main(sys.argv[1])
