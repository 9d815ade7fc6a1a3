"""The language-model report: perplexity, and decoders side by side.

For an 'lm' task (tasks/lm/): the model's perplexity on the eval split's
examples (teacher-forced, the continuation tokens only, eos included where
an example ends a document), then greedy and blockwise decoding of the
split's prompts compared as the translation report compares them (mean
accepted block, model calls, wall-clock, speedup, identical_to_greedy).
A continuation has no single right answer, so there is no BLEU column:
exact blockwise decoding is measured by identical_to_greedy, the model by
its perplexity. The report of language-model tasks (`reports.Report`).
"""

import math
import time
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bpd_jax import predictions
from bpd_jax.evaluation import outputs
from bpd_jax.evaluation import runner
from bpd_jax.evaluation.spec import DecoderSpec
from bpd_jax.tasks import batching
from bpd_jax.tasks.lm import task as lm_task
from bpd_jax.training import losses

COLUMNS = ('decoder', 'mean_block', 'model_calls', 'wall_s', 'speedup',
           'identical_to_greedy')


class Score(NamedTuple):
  """What `perplexity` measured."""
  perplexity: float
  tokens: int  # Continuation tokens scored.
  cut: bool  # The token budget left some unscored.


def perplexity(model, examples: batching.EncodedPairs,
               batch_size: int = 16, *, max_tokens: int = 0,
               log: Callable[[str], None] | None = None,
               progress_s: float = 30.0) -> Score:
  """exp(mean negative log-likelihood) of the continuation tokens.

  Args:
    model: a decoder-only Transformer.
    examples: (prompt ids, continuation ids) pairs.
    batch_size: examples a forward pass (the last batch is filled with
      copies of the first, which are not counted).
    max_tokens: score the first this many continuation tokens, in the
      examples' order (0: all): the example that reaches the budget is
      scored up to it (its first tokens, teacher-forced: what the whole
      example gives them, attention being causal), later ones not at all.
    log: takes a progress line (tokens scored so far, of how many) each
      time `progress_s` seconds have passed since the last; None: quiet.
    progress_s: seconds between progress lines.

  Returns:
    Score(perplexity, tokens scored, cut: whether `max_tokens` left
    tokens of `examples` unscored).
  """
  if not len(examples):
    raise ValueError('perplexity needs at least one example.')
  if max_tokens < 0:
    raise ValueError(f'max_tokens={max_tokens} must be >= 0 (0: all).')
  prompt_lengths, lengths = examples.lengths()
  prompt_width, width = int(prompt_lengths.max()), int(lengths.max())
  goal = min(max_tokens, int(lengths.sum())) if max_tokens else int(
      lengths.sum())
  total, count, cut = 0.0, 0, False
  started = last_line = time.monotonic()
  for start in range(0, len(examples), batch_size):
    if max_tokens and count >= max_tokens:
      cut = True  # Whole examples are left.
      break
    rows = [examples[i] for i in range(start, min(start + batch_size,
                                                  len(examples)))]
    real = len(rows)
    rows += [examples[0]] * (batch_size - real)
    # Without a budget, more than the batch holds: every token is scored.
    budget = max_tokens - count if max_tokens else batch_size * width
    nll, tokens, available = _negative_log_likelihood(
        model, jnp.asarray(batching.pad_rows([p for p, _ in rows],
                                             prompt_width,
                                             pad_id=model.config.pad_id)),
        jnp.asarray(batching.pad_rows([c for _, c in rows], width,
                                      pad_id=model.config.pad_id)),
        jnp.asarray(budget, jnp.int32))
    total += float(np.asarray(nll)[:real].sum())
    scored = int(np.asarray(tokens)[:real].sum())
    count += scored
    cut = scored < int(np.asarray(available)[:real].sum())
    now = time.monotonic()
    if log is not None and now - last_line >= progress_s:
      log(f'  perplexity: {count:,} of {goal:,} tokens scored, '
          f'{now - started:.0f} s')
      last_line = now
  return Score(math.exp(total / max(count, 1)), count, cut)


@jax.jit
def _negative_log_likelihood(model, prompts, continuations, budget):
  """Each row's summed NLL of its continuation's tokens, the first `budget`
  of the batch's (row by row) alone.

  Args:
    model: a decoder-only Transformer.
    prompts: [batch, S] prompt ids, right-padded with pad_id.
    continuations: [batch, T] continuation ids, right-padded with pad_id.
    budget: [] tokens to score at most, the batch's rows in order.

  Returns:
    ([batch] NLL summed over the scored tokens, [batch] tokens scored,
    [batch] tokens the rows hold).
  """
  config = model.config
  tokens, labels = losses.decoder_only_sequence(prompts, continuations,
                                                config.pad_id)
  hidden = model(None, losses.shift_right(tokens, config.bos_id))
  logits = model.next_token_logits(hidden)
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32))
  real = labels != config.pad_id
  # The budget's tokens: the first ones in row-major order.
  mask = real & (jnp.cumsum(real.ravel()).reshape(real.shape) <= budget)
  # Padding labels (-1 where no vocabulary id pads) read logit 0, unused.
  picked = jnp.take_along_axis(log_probs, jnp.maximum(labels, 0)[..., None],
                               -1)[..., 0]
  return -jnp.where(mask, picked, 0.0).sum(1), mask.sum(1), real.sum(1)


def evaluate(model, task: lm_task.LMTask, split: str,
             decoders: list[DecoderSpec], *, batch_size: int,
             num_examples: int = 0, repeats: int = 1, mesh=None,
             param_rules=(), draft_vocab=None, rescorers=None, log=print,
             perplexity_tokens: int = 0) -> dict:
  """Perplexity on `split`, and its prompts decoded with every decoder.

  Args:
    model: a decoder-only Transformer.
    task: the language-model task.
    split: split name, e.g. 'validation'.
    decoders: greedy first (the reference of speedups and
      identical_to_greedy), each generating its max_len tokens a prompt.
    batch_size: prompts decoded together.
    num_examples: the first this many prompts (0: all).
    repeats, mesh, param_rules, draft_vocab, log: as
      `reports.Report.evaluate` takes them.
    perplexity_tokens: perplexity over the split's first this many
      continuation tokens (0: all of them; `perplexity`'s max_tokens).

  Returns:
    dict(split, examples, perplexity, scored_tokens, perplexity_cut
    (whether perplexity_tokens left tokens of the split unscored),
    truncated_prompts, rows: a row per decoder, head_accuracy:
    dict(greedy=each head's teacher-forced accuracy on the greedy
    continuations, what acceptance depends on;
    `predictions.head_accuracy`)).
  """
  sources, truncated = task.sources(split, model.config.max_source_len,
                                    num_examples)
  # The prompts there are: a split may hold fewer than num_examples.
  log(f'Perplexity of {split}, then its prompts ({len(sources)}) '
      f'decoded with {len(decoders)} decoders:')
  ppl, scored, cut = perplexity(model, task.encoded(split),
                                max_tokens=perplexity_tokens, log=log)
  log(f'  perplexity on {split}: {ppl:.3f} ({scored} tokens'
      + (', cut there by eval.perplexity_tokens)' if cut else ')'))
  if truncated:
    log(f'warning: {truncated} of {len(sources)} {split} prompts exceed '
        f'max_source_len={model.config.max_source_len} and kept their end.')
  measured = runner.decode_sources(
      model, sources, decoders, batch_size=batch_size,
      repeats=repeats, mesh=mesh, param_rules=param_rules,
      draft_vocab=draft_vocab, rescorers=rescorers, log=log)
  rows = runner.comparison_rows(measured, decoders)
  for row in rows:
    log(f'  {row["decoder"]}: mean block {row["mean_block"]}, '
        f'{row["wall_s"]:.2f} s')
  greedy = measured[0].outputs
  head_accuracy = predictions.head_accuracy(
      model, batching.pad_rows(sources, model.config.max_source_len,
                               pad_id=model.config.pad_id),
      greedy.tokens, greedy.lengths, heads=model.config.num_proposal_heads)
  log(f'  teacher-forced accuracy per head, on the greedy outputs: '
      f'{head_accuracy}')
  return dict(split=split, examples=len(sources), perplexity=round(ppl, 4),
              scored_tokens=scored, perplexity_cut=cut,
              truncated_prompts=truncated, rows=rows,
              head_accuracy=dict(greedy=head_accuracy))


def write(result: dict, config, workdir: str, log) -> None:
  """WORKDIR/eval_<split>.json, and the table with the perplexity."""
  path = outputs.write_rows(result, config, workdir, COLUMNS, log)
  log(f'{result["examples"]} prompts of {config.eval.split}, '
      f'{config.eval.max_len} tokens each; perplexity '
      f'{result["perplexity"]} over '
      + ('the first ' if result['perplexity_cut'] else '')
      + f'{result["scored_tokens"]} tokens'
      + (' (eval.perplexity_tokens)' if result['perplexity_cut'] else '')
      + f'. Report: {path}')


def training_figures(result: dict) -> dict[str, float]:
  """The model's perplexity on the split (what its decoders share)."""
  return {'eval/perplexity': result['perplexity']}
