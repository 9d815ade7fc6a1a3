"""What the heads' drafts look like (Kim et al. 2024, Section 4).

Measured teacher-forced on the model's own greedy outputs: one full forward
pass over bos + output gives, at every output position i, every head's
distribution, exactly the ones the blockwise decoder sees when its last
accepted token is the output's token i (head h predicts token i + h - 1).
Every position is a potential draft, so the statistics cover all of them,
not only the positions a particular k happens to visit; block efficiency
is then simulated from the same arrays with the decoder's acceptance rule
(and cross-checked against a real decode by the job). `analyse` is the
draft job's second step: all of it on the greedy outputs of its sources.

- consecutive repetition: adjacent equal tokens in a k-token draft (the
  scoring model's token and heads 2..k's argmax), beside the same rate in
  the outputs themselves;
- head confidence: mean max softmax probability of each head, and how
  often its argmax is the greedy token;
- oracle top-t block efficiency: tokens per call if each call verified the
  best draft of the heads' top-t lattice (the greedy token wherever it is
  among a head's top t): the headroom of draft refinement.
"""

from typing import Callable, Sequence

import numpy as np

from bpd_jax import generate
from bpd_jax import predictions
from bpd_jax.predictions import targets, top1_accuracy
from bpd_jax.tasks import batching

# Sources decoded greedily at a time for the analysis.
_GREEDY_BATCH = 32


def analyse(decoder: generate.Decoder, sources: Sequence[Sequence[int]],
            drafts_config, max_len: int,
            log: Callable[[str], None]) -> dict:
  """The heads' drafts on the greedy outputs of `sources`.

  Args:
    decoder: the model's Decoder.
    sources: the inputs to decode, each at most the model's
      max_source_len ids.
    drafts_config: the config's `drafts` section: ks (block sizes) and
      top_ts (lattice widths of the oracle).
    max_len: most tokens generated per source.
    log: a line per k.

  Returns:
    dict(examples, tokens: output tokens, confidence: `confidence`'s,
    per_k: {k: dict(repetition: `repetition`'s, oracle_block_efficiency:
    {t: tokens per call of `simulate_blocks`})}).
  """
  d = drafts_config
  padded = batching.pad_rows(sources, decoder.config.max_source_len,
                             pad_id=decoder.config.pad_id)
  results = [decoder.greedy(padded[start:start + _GREEDY_BATCH],
                            max_len=max_len)
             for start in range(0, len(padded), _GREEDY_BATCH)]
  outputs = np.concatenate([np.asarray(r.tokens) for r in results])
  lengths = np.concatenate([np.asarray(r.lengths) for r in results])
  top, conf = predictions.head_predictions(
      decoder.model, padded, outputs, heads=max(d.ks), top_t=max(d.top_ts))
  per_k = {}
  for k in d.ks:
    oracle = {}
    for t in d.top_ts:
      tokens, calls = simulate_blocks(top, outputs, lengths, k, t)
      oracle[t] = round(tokens / calls, 3)
    per_k[k] = dict(repetition=repetition(top, outputs, lengths, k),
                    oracle_block_efficiency=oracle)
    log(f'k={k}: {per_k[k]}')
  return dict(examples=len(sources), tokens=int(lengths.sum()),
              confidence=confidence(top, conf, outputs, lengths),
              per_k=per_k)


def simulate_blocks(top: np.ndarray, outputs: np.ndarray, lengths: np.ndarray,
                    k: int, t: int) -> tuple[int, int]:
  """(tokens, model calls) of blockwise decoding with oracle top-t drafts.

  t = 1 is plain blockwise decoding with exact verification. The counting
  is the decoder's: the first call yields one token; each later call
  accepts the proposals up to the first miss and appends the scoring
  model's token after them.

  Args:
    top: [batch, length, K, >= t] from `head_predictions`.
    outputs: [batch, length] greedy outputs.
    lengths: [batch] output lengths (eos included).
    k: block size, 1 <= k <= K.
    t: lattice width.
  """
  # hit[b, i, h]: head h + 1 at position i has output token i + h in its
  # top t (False past the end).
  batch = top.shape[0]
  target, valid = targets(outputs, lengths, top.shape[2])
  hit = (top[..., :t] == target[..., None]).any(-1) & valid
  tokens = calls = 0
  for b in range(batch):
    n, c = 1, 1  # The first call: one token.
    while n < lengths[b]:
      # The block after token n - 1 comes from position n - 1: heads 2..k.
      accepted = 0
      while accepted < k - 1 and hit[b, n - 1, accepted + 1]:
        accepted += 1
      n = min(n + accepted + 1, int(lengths[b]))
      c += 1
    tokens += int(lengths[b])
    calls += c
  return tokens, calls


def repetition(top: np.ndarray, outputs: np.ndarray, lengths: np.ndarray,
               k: int) -> dict:
  """Consecutive repetition in the k-token drafts and in the outputs.

  Returns:
    dict(draft_pairs: fraction of adjacent draft positions with equal
    tokens, drafts_with_repeat: fraction of drafts with at least one such
    pair, output_pairs: the same pair fraction in the outputs, the rate
    the drafts would show if the heads were always right).
  """
  drafts = top[:, :, :k, 0]  # [batch, length, k]
  valid = np.arange(top.shape[1])[None, :] < lengths[:, None]
  same = drafts[..., 1:] == drafts[..., :-1]
  pairs = valid[..., None].repeat(k - 1, -1)
  out_same = outputs[:, 1:] == outputs[:, :-1]
  out_valid = np.arange(1, outputs.shape[1])[None, :] < lengths[:, None]
  return dict(
      draft_pairs=_ratio(same[pairs].sum(), pairs.sum()),
      drafts_with_repeat=_ratio(same.any(-1)[valid].sum(), valid.sum()),
      output_pairs=_ratio(out_same[out_valid].sum(), out_valid.sum()))


def confidence(top: np.ndarray, conf: np.ndarray, outputs: np.ndarray,
               lengths: np.ndarray) -> dict:
  """Per head: mean max probability and accuracy against the greedy token."""
  heads = top.shape[2]
  target, valid = targets(outputs, lengths, heads)  # valid: the token exists.
  right = top[..., 0] == target
  return dict(
      mean_max_prob=[_ratio(conf[..., h][valid[..., h]].sum(),
                            valid[..., h].sum()) for h in range(heads)],
      accuracy=top1_accuracy(top, outputs, lengths),
      mean_max_prob_when_right=[
          _ratio(conf[..., h][valid[..., h] & right[..., h]].sum(),
                 (valid[..., h] & right[..., h]).sum())
          for h in range(heads)],
      mean_max_prob_when_wrong=[
          _ratio(conf[..., h][valid[..., h] & ~right[..., h]].sum(),
                 (valid[..., h] & ~right[..., h]).sum())
          for h in range(heads)])


def _ratio(a, b) -> float:
  return round(float(a) / float(b), 4) if b else float('nan')
