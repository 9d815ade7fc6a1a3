"""The language-model report: perplexity and the decoders side by side."""

import dataclasses
import math

import jax
import numpy as np
import pytest
from flax import nnx

from bpd_jax.evaluation import lm
from bpd_jax.evaluation.spec import DecoderSpec
from bpd_jax.models import Transformer, TransformerConfig
from bpd_jax.tasks import batching
from bpd_jax.tasks.lm import task as task_lib
from bpd_jax.tasks.text import vocab as vocab_lib

WORDS = [f'w{i}' for i in range(16)]


def setup():
  model = Transformer(TransformerConfig.from_size(
      'tiny', vocab_size=20, num_encoder_layers=0, num_proposal_heads=3,
      max_source_len=5, max_target_len=40), rngs=nnx.Rngs(0))
  rng = np.random.default_rng(0)
  examples = [([], list(rng.integers(4, 20, size=n)) + [1])
              for n in (9, 6, 12, 3, 8)]
  examples.append(([5, 6], [7, 8, 1]))  # One with its own prompt.
  pairs = batching.EncodedPairs.from_pairs(examples)
  task = task_lib.LMTask(vocab_lib.WordVocabulary(WORDS),
                         {'validation': pairs}, eval_prompt_len=4,
                         train_prompt_len=0)
  return model, task, examples


def test_perplexity_is_the_mean_likelihood_of_the_continuations():
  model, task, examples = setup()
  ppl, count, cut = lm.perplexity(model, task.encoded('validation'),
                                  batch_size=4)
  by_hand = token_log_likelihoods(model, examples)
  assert count == len(by_hand) == sum(len(c) for _, c in examples)
  assert not cut
  np.testing.assert_allclose(ppl, math.exp(-sum(by_hand) / count),
                             rtol=1e-4)


def token_log_likelihoods(model, examples) -> list[float]:
  """Each continuation token's log-likelihood, the examples in order, by
  hand: each sequence right-padded to one length (causal attention:
  padding after a position does not change its logits), one forward
  pass."""
  sequences = [[model.config.bos_id] + p + c for p, c in examples]
  length = max(map(len, sequences))
  inputs = np.array([s + [0] * (length - len(s)) for s in sequences])
  log_probs = np.asarray(jax.nn.log_softmax(
      model.next_token_logits(model(None, inputs[:, :-1]))))
  return [float(log_probs[row, len(prompt) + i, token])
          for row, (prompt, continuation) in enumerate(examples)
          for i, token in enumerate(continuation)]


# 46 tokens in all: 10 + 7 + 13 + 4 + 9 + 3 (eos included). Batches of 4
# examples: 34 tokens, then 12. A budget inside an example, at an
# example's end, across the batches' border, at and beyond the whole.
@pytest.mark.parametrize('budget', [1, 15, 17, 34, 40, 46, 100])
def test_a_token_budget_scores_the_first_tokens_exactly(budget):
  model, task, examples = setup()
  ppl, count, cut = lm.perplexity(model, task.encoded('validation'),
                                  batch_size=4, max_tokens=budget)
  by_hand = token_log_likelihoods(model, examples)
  assert count == min(budget, 46) and cut == (budget < 46)
  # The example that reaches the budget is scored up to it.
  np.testing.assert_allclose(ppl, math.exp(-sum(by_hand[:count]) / count),
                             rtol=1e-4)


def test_a_budget_beyond_the_split_scores_what_no_budget_scores():
  model, task, _ = setup()
  examples = task.encoded('validation')
  assert lm.perplexity(model, examples, batch_size=4, max_tokens=46) == (
      lm.perplexity(model, examples, batch_size=4))


def test_progress_lines_say_the_tokens_scored_of_the_budget():
  model, task, _ = setup()
  lines = []
  lm.perplexity(model, task.encoded('validation'), batch_size=4,
                max_tokens=40, log=lines.append, progress_s=0)
  assert lines[0].startswith('  perplexity: 34 of 40 tokens scored, ')
  assert lines[1].startswith('  perplexity: 40 of 40 tokens scored, ')
  assert len(lines) == 2
  quiet = []  # No line before progress_s seconds.
  lm.perplexity(model, task.encoded('validation'), batch_size=4,
                log=quiet.append, progress_s=3600)
  assert not quiet


def test_a_negative_budget_is_refused():
  model, task, _ = setup()
  with pytest.raises(ValueError, match='max_tokens=-1 must be >= 0'):
    lm.perplexity(model, task.encoded('validation'), max_tokens=-1)


def test_perplexity_without_a_pad_token_is_that_of_padding_with_0():
  # No example holds id 0: padding with -1 (pad_id=-1) scores what
  # padding with 0 scores, on the same weights.
  model, task, _ = setup()
  minus = Transformer(dataclasses.replace(model.config, pad_id=-1),
                      rngs=nnx.Rngs(0))
  examples = task.encoded('validation')
  assert lm.perplexity(minus, examples, batch_size=4) == lm.perplexity(
      model, examples, batch_size=4)


def test_prompts_decoded_by_every_decoder_exact_equals_greedy():
  model, task, _ = setup()
  decoders = [DecoderSpec.of(8), DecoderSpec.of(8, 2), DecoderSpec.of(8, 3)]
  said = []
  report = lm.evaluate(model, task, 'validation', decoders, batch_size=2,
                       num_examples=9, log=said.append)
  # Prompt-less examples longer than 4 tokens, and the prompted one.
  assert report['examples'] == 5 and report['truncated_prompts'] == 0
  # The prompts decoded, not the 9 asked for.
  assert said[0] == ('Perplexity of validation, then its prompts (5) '
                     'decoded with 3 decoders:')
  assert report['perplexity'] > 1
  assert report['scored_tokens'] == 46 and not report['perplexity_cut']
  assert said[1] == (f'  perplexity on validation: '
                     f'{report["perplexity"]:.3f} (46 tokens)')
  rows = report['rows']
  assert [r['decoder'] for r in rows] == ['greedy', 'blockwise k=2',
                                          'blockwise k=3']
  assert all(r['identical_to_greedy'] == 1.0 for r in rows)
  assert rows[0]['mean_block'] == 1.0 and rows[2]['mean_block'] >= 1.0


def test_sampling_rows_are_timed_against_ancestral_sampling():
  model, task, _ = setup()
  sampler = 'temperature=1.0'
  decoders = [DecoderSpec.of(6), DecoderSpec.of(6, sampler=sampler),
              DecoderSpec.of(6, 2, sampler=sampler)]
  rows = lm.evaluate(model, task, 'validation', decoders, batch_size=2,
                     log=lambda _: None)['rows']
  assert [r['decoder'] for r in rows] == [
      # Named by the sampler's own spec: one name for one sampler.
      'greedy', 'ancestral temperature=1', 'blockwise k=2 temperature=1']
  assert rows[1]['identical_to_greedy'] is None and rows[2]['speedup'] > 0
