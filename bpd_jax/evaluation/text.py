"""The translation report: decoders compared side by side on an eval split.

The report of text tasks (`reports.Report`): used by the evaluate job, by
periodic evaluation during training and by the main job's final table.
The decoders run through the harness
(`runner.run`: eval.repeats timed rounds over the whole split, the
decoders interleaved, after compiling; a decoder's wall_s is its median
round); the
report gives quality, mean accepted block size, model calls, wall-clock,
speedup over greedy decoding and the fraction of outputs identical to
greedy's; sampling decoders (eval.samplers) their speedup over ancestral
sampling with the same sampler.

Quality is BLEU twice over, so that both kinds of published figure can be
compared: `bleu` is sacreBLEU on detokenized output against the raw
references (tokenize='13a', its signature printed beside the score: the
comparable modern figure); `bleu_intl` is tokenized BLEU as Tensor2Tensor's
t2t-bleu computes it, the convention of the papers of that code base (Stern
et al. 2018 among them): mteval-v14's international tokenization, which
sacreBLEU reproduces as tokenize='intl'. Neither splits German compounds,
as the Transformer paper's multi-bleu figures did (which raises them), so
those are not directly comparable.
"""

import numpy as np
import sacrebleu

from bpd_jax import predictions
from bpd_jax import tasks
from bpd_jax.evaluation import outputs
from bpd_jax.evaluation import runner
from bpd_jax.evaluation.spec import DecoderSpec
from bpd_jax.tasks import batching

COLUMNS = ('decoder', 'bleu', 'mean_block', 'model_calls', 'wall_s',
           'speedup', 'identical_to_greedy')


def bleu(hypotheses: list[str], references: list[str],
         tokenize: str = '13a', tokenized_text: bool = False
         ) -> tuple[float, str]:
  """Corpus BLEU of detokenized text, and sacreBLEU's signature.

  tokenize='13a' is sacreBLEU's standard; 'intl' is the tokenized BLEU of
  t2t-bleu (see the module docstring). tokenized_text: the text is tokens
  joined by spaces by construction (a word vocabulary's), so sacreBLEU's
  warning that it looks tokenized (printed on the console) says nothing.
  """
  metric = sacrebleu.metrics.BLEU(tokenize=tokenize, force=tokenized_text)
  score = metric.corpus_score(hypotheses, [references]).score
  return score, str(metric.get_signature())


def evaluate(model, task: tasks.TextualTask, split: str,
             decoders: list[DecoderSpec], *, batch_size: int,
             num_examples: int = 0, repeats: int = 1, mesh=None,
             param_rules=(), draft_vocab=None,
             rescorers=None, log=print) -> dict:
  """Decodes `split` with every decoder; returns the report.

  Args:
    model: the Transformer.
    task: a text task (vocabulary and sentence pairs).
    split: split name, e.g. 'validation'.
    decoders: greedy must come first: it is the reference of the speedups
      and of identical_to_greedy (its max_len, most tokens a sentence,
      cuts the references the heads' accuracy is measured on) (a sampling decoder's speedup is over the
      ancestral sampling of its sampler, which must be among them; its
      identical_to_greedy is None).
    batch_size: sentences decoded together (a multiple of the mesh's data
      axis when a mesh is given).
    num_examples: the first this many sentences (0: all).
    repeats, mesh, param_rules, draft_vocab, log: as
      `reports.Report.evaluate` takes them.

  Returns:
    dict(split, examples, truncated_sources, bleu_signature,
    bleu_intl_signature, rows: a row per decoder, head_accuracy: each
    head's teacher-forced accuracy on the greedy outputs (what acceptance
    depends on) and on the references, `predictions.head_accuracy`).
  """
  pairs = task.pairs(split)[:num_examples or None]
  # The sentences there are: num_examples may ask for more.
  log(f'Decoding {split} ({len(pairs)} sentences) with {len(decoders)} '
      f'decoders:')
  sources, truncated = task.sources(split, model.config.max_source_len,
                                    num_examples)
  if truncated:
    log(f'warning: {truncated} of {len(sources)} {split} sources exceed '
        f'max_source_len={model.config.max_source_len} and were cut.')
  references = [target for _, target in pairs]
  measured = runner.decode_sources(
      model, sources, decoders, batch_size=batch_size,
      repeats=repeats, mesh=mesh, param_rules=param_rules,
      draft_vocab=draft_vocab, rescorers=rescorers, log=log)
  rows = runner.comparison_rows(measured, decoders)
  tokenized = task.vocab.tokenized_text
  for run, row in zip(measured, rows):
    hypotheses = [task.vocab.decode(tokens) for tokens in run.outputs.tokens]
    score, signature = bleu(hypotheses, references, tokenized_text=tokenized)
    score_intl, signature_intl = bleu(hypotheses, references, 'intl',
                                      tokenized_text=tokenized)
    row.update(bleu=round(score, 2), bleu_intl=round(score_intl, 2))
    log(f'  {run.spec.name}: BLEU {score:.2f}, mean block '
        f'{row["mean_block"]}, {row["wall_s"]:.2f} s')
  greedy = measured[0].outputs
  padded = batching.pad_rows(sources, model.config.max_source_len,
                             pad_id=model.config.pad_id)
  heads = model.config.num_proposal_heads
  # The references, cut where the decoders' outputs are.
  max_len = decoders[0].max_len
  references_tokens = [(tokens + [model.config.eos_id])[:max_len] for tokens
                       in task.vocab.encode_many(references)]
  head_accuracy = dict(
      greedy=predictions.head_accuracy(
          model, padded, greedy.tokens, greedy.lengths, heads=heads),
      references=predictions.head_accuracy(
          model, padded, batching.pad_rows(references_tokens, max_len,
                                           pad_id=model.config.pad_id),
          np.array([len(t) for t in references_tokens]), heads=heads))
  log(f'  teacher-forced accuracy per head, on the greedy outputs: '
      f'{head_accuracy["greedy"]}; on the references: '
      f'{head_accuracy["references"]}')
  return dict(split=split, examples=len(pairs), truncated_sources=truncated,
              bleu_signature=signature, bleu_intl_signature=signature_intl,
              rows=rows, head_accuracy=head_accuracy)


def write(result: dict, config, workdir: str, log) -> None:
  """WORKDIR/eval_<split>.json, and the table with BLEU's signatures
  (bleu_intl's too with eval.tokenized_bleu)."""
  columns = COLUMNS
  if config.eval.tokenized_bleu:
    columns = ('decoder', 'bleu', 'bleu_intl') + COLUMNS[2:]
  path = outputs.write_rows(result, config, workdir, columns, log)
  log(f'{result["examples"]} sentences of {config.eval.split}; BLEU: '
      f'{result["bleu_signature"]}' + (
          f'; bleu_intl (tokenized, as t2t-bleu): '
          f'{result["bleu_intl_signature"]}' if 'bleu_intl' in columns
          else '') + f'. Report: {path}')


def training_figures(result: dict) -> dict[str, float]:
  """Greedy decoding's BLEU."""
  return {'eval/bleu': result['rows'][0]['bleu']}
