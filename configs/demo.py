"""Decoding demo: greedy vs blockwise decoding, side by side.

    python -m bpd_jax.main --config=configs/demo.py --workdir=/tmp/bpd_demo

Builds the model described below with random weights, decodes a batch of
random source sentences greedily and blockwise for every k in `decode.ks`,
and prints one row per decoder: identical-to-greedy fraction (1.0 with exact
verification), mean accepted block size, model calls, wall-clock and speedup.
Expected on a 2-core CPU in under a minute: identical_to_greedy 1.0 for every
k. An untrained model mostly repeats a token and its residual heads propose
that token too, so mean blocks come out long (measured: 1.9 / 3.8 / 7.1 for
k = 2 / 4 / 8) while the speedup stays near 1x (1.06-1.14x): on a CPU a
k-position call costs several 1-position calls, and the untrained heads add
weights read at every call. The numbers show the machinery, not a model.

Options (`--config=configs/demo.py:size=tiny,batch=4`): size, batch.
Any field can also be set with `--config.decode.max_len=32` and the like.
"""

import ml_collections

from bpd_jax import config_options


def get_config(arg=None):
  options = config_options.parse(arg, size='small', batch=8)
  config = ml_collections.ConfigDict()
  config.seed = 0  # Seed of the weights and of the random source sentences.

  config.model = model = ml_collections.ConfigDict()
  model.size = options['size']  # tiny | small | base | big (models/transformer.py).
  model.vocab_size = 1000  # Shared source/target vocabulary, special ids included.
  model.num_proposal_heads = 8  # k heads trained; decoding may use any k up to this.
  model.head_layer = 'independent'  # 'independent' heads or the paper's 'joint' layer.
  model.head1_from_base = True  # Verify against the base model's own output.
  model.dropout_rate = 0.1  # Training only; decoding is deterministic.
  model.max_source_len = 64  # Longest source the encoder takes.
  model.max_target_len = 128  # Decoder positions: 1 + max_len + k - 1 must fit.

  config.decode = decode = ml_collections.ConfigDict()
  decode.batch_size = options['batch']  # Source sentences decoded together.
  decode.source_len = 24  # Longest random source sentence, in tokens.
  decode.max_len = 64  # Most tokens generated per sentence.
  decode.ks = (2, 4, 8)  # Block sizes to compare with greedy decoding.
  decode.criterion = 'exact'  # 'exact', 'top-k:T' or 'distance:EPS'.
  decode.min_block = 1  # Fewest tokens accepted per call (l <= min k).
  decode.repeats = 3  # Timed runs per decoder after compiling; the median counts.
  return config
