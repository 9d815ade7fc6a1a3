"""The draft job's first step: the rescorers its refinements use.

The n-gram model (interpolated Kneser-Ney, drafts.ngram_order) is built,
and the small neural LM (drafts.lm_*) trained, on one corpus: the task's
training targets or a file of sentences (drafts.corpus), such as a
distilled corpus, the model's own outputs. Each is built only if one of
drafts.refinements uses it, and saved in the job's output directory
(reusable from Python: `ngram.NgramModel.load`, `lm.load`).
"""

import os
import time
from typing import Callable

from bpd_jax import tasks
from bpd_jax.drafts import lm as lm_lib
from bpd_jax.rescorers import ngram

NGRAM_FILE, LM_DIR = 'ngram.npz', 'lm'


def corpus(drafts_config, task: tasks.TextualTask,
           eos_id: int) -> list[list[int]]:
  """The rescorers' training text as token ids, each sentence eos-ended.

  Args:
    drafts_config: the config's `drafts` section: corpus ('targets', the
      task's training targets, or a file of sentences, one a line) and
      corpus_limit (the first this many sentences, 0: all).
    task: the text or language-model task whose vocabulary encodes it.
    eos_id: the model's eos.

  Raises:
    ValueError: drafts.corpus names no file.
  """
  d = drafts_config
  if d.corpus == 'targets':
    texts = [target for _, target in task.pairs('train')]
  else:
    if not os.path.isfile(d.corpus):
      raise ValueError(f'drafts.corpus={d.corpus!r}: no such file (give '
                       f"'targets' or a file of target sentences, one a "
                       f'line).')
    with open(d.corpus) as f:
      texts = [line.rstrip('\n') for line in f]
  texts = texts[:d.corpus_limit or None]
  return [ids + [eos_id] for ids in task.vocab.encode_many(texts)]


def build(config, task: tasks.TextualTask, model_config,
          text: list[list[int]], needed: set[str], output_dir: str,
          log: Callable[[str], None]) -> tuple[dict, dict]:
  """Builds the rescorers `needed` names on `text` and saves each in
  `output_dir`.

  Args:
    config: the whole config (its drafts section, seed and eval.split).
    task: the task (its eval split is the neural LM's held-out text).
    model_config: the decoding model's TransformerConfig (vocab_size,
      bos_id, eos_id: the rescorers score its ids).
    text: `corpus`'s sentences.
    needed: the rescorers the refinements use: 'ngram', 'neural'.
    output_dir: where NGRAM_FILE and LM_DIR are written.
    log: progress lines.

  Returns:
    ({'ngram': NgramModel, 'neural': LM} as needed, the report's figures
    {'ngram': its size and build time, 'lm': its training losses}).
  """
  rescorers, figures = {}, {}
  if 'ngram' in needed:
    rescorers['ngram'], figures['ngram'] = _ngram(config.drafts, model_config,
                                                  text, output_dir)
    log(f'n-gram model: {figures["ngram"]}')
  if 'neural' in needed:
    rescorers['neural'], figures['lm'] = _neural(config, task, model_config,
                                                 text, output_dir, log)
    log(f'rescoring LM: {figures["lm"]}')
  return rescorers, figures


def _ngram(d, model_config, text, output_dir):
  """(the n-gram model of `text`, its size and build time)."""
  begin = time.perf_counter()
  model = ngram.build(text, order=d.ngram_order,
                      vocab_size=model_config.vocab_size,
                      bos_id=model_config.bos_id, eos_id=model_config.eos_id)
  model.save(os.path.join(output_dir, NGRAM_FILE))
  return model, dict(
      order=d.ngram_order, sentences=len(text),
      contexts=int(model.context_word.shape[0]),
      entries=int(model.entry_word.shape[0]),
      megabytes=round(model.nbytes() / 2**20, 2),
      build_s=round(time.perf_counter() - begin, 1))


def _neural(config, task, model_config, text, output_dir, log):
  """(the neural LM trained on `text`, its training figures and its loss
  on the eval split's targets)."""
  d = config.drafts
  ids = dict(bos_id=model_config.bos_id, eos_id=model_config.eos_id)
  model = lm_lib.make(model_config.vocab_size, d.lm_window,
                      d_model=d.lm_d_model, layers=d.lm_layers,
                      seed=config.seed)
  log(f'Training the rescoring LM ({d.lm_steps} steps)...')
  figures = lm_lib.train(model, lm_lib.windows(text, d.lm_window, **ids),
                         steps=d.lm_steps, seed=config.seed, log=log)
  held_out = [t + [model_config.eos_id] for t in task.vocab.encode_many(
      [target for _, target in task.pairs(config.eval.split)])]
  figures['eval_loss'] = round(lm_lib.evaluate(
      model, lm_lib.windows(held_out, d.lm_window, **ids)), 4)
  lm_lib.save(model, os.path.join(output_dir, LM_DIR))
  return model, figures
