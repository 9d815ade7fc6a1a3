"""The report of a config's task: the one the jobs print and train logs.

Each task kind has one report module, picked by the kind its task declares
(`tasks.spec.TaskSpec.kind`), as big_vision picks an evaluator by its type:
the translation report (`text.py`: BLEU), the super-resolution report
(`image.py`: PSNR/SSIM) and the language-model report (`lm.py`:
perplexity). Every one follows `Report`; this module runs what they share
(the mesh, the placement, the decoders of config.eval) after training
(main job), on a restored run (evaluate job) and, shortened, every
eval.every training steps (`periodic`, the callback `train.train` is
given). A new kind adds its module and one entry of `REPORTS`.
"""

import functools
from typing import Callable, Protocol

import jax

from bpd_jax import decoding
from bpd_jax import draft_vocab
from bpd_jax import tasks
from bpd_jax.evaluation import image
from bpd_jax.evaluation import lm
from bpd_jax.evaluation import placement
from bpd_jax.evaluation import spec
from bpd_jax.evaluation import text
from bpd_jax.evaluation.spec import DecoderSpec
from bpd_jax.infra import errors
from bpd_jax.infra import sharding
from bpd_jax.models import drafters
from bpd_jax.rescorers import ngram


class Report(Protocol):
  """What a task kind's report module defines."""

  def evaluate(self, model, task: tasks.Task, split: str,
               decoders: list[DecoderSpec], *, batch_size: int,
               num_examples: int = 0, repeats: int = 1,
               mesh=None, param_rules=(), draft_vocab=None,
               rescorers=None,
               log: Callable[[str], None] = print) -> dict:
    """Decodes the first `num_examples` (0: all) of `split` with every
    decoder (greedy first: the reference), `batch_size` at a time, at
    most each decoder's max_len tokens an example; returns the result:
    'rows', one per decoder (the names of the decoders), beside any
    baseline's, and the kind's own figures. A kind may take more keyword
    arguments after these, with defaults (`_own_options` gives them from
    config.eval); these every kind passes on alike
    (`runner.decode_sources`):

    Args:
      repeats: timed rounds of every decoder over the batches, interleaved
        (`runner.run`); wall_s is a decoder's median round.
      mesh: optional mesh to shard the batch over (None: one device).
      param_rules: how the parameters are split over `mesh`
        (`generate.Decoder`; () replicates them).
      draft_vocab: the ids proposals are chosen from (`generate.Decoder`;
        None: all).
      rescorers: {'ngram': NgramModel}, the n-gram model of 'ngram'
        drafters (eval.ngram_path); None: none.
      log: progress messages go here.
    """

  def write(self, result: dict, config, workdir: str,
            log: Callable[[str], None]) -> None:
    """Saves `result` in `workdir` and prints its table (process 0)."""

  def training_figures(self, result: dict) -> dict[str, float]:
    """The greedy decoder's quality as periodic evaluation logs it:
    {'eval/<figure>': value}."""


REPORTS: dict[str, Report] = {'image': image, 'lm': lm, 'text': text}


def report(config, workdir: str, model, task: tasks.Task,
           log: Callable[[str], None] = print) -> dict:
  """Decodes config.eval.split with the decoders of config.eval, prints
  the task's report and writes it to `workdir`; returns its result."""
  model, mesh, rules = placement.placement(model, config, _mesh(config), log)
  draft_ids = draft_vocab.of_task(task, config.eval.draft_vocab_size)
  if draft_ids is not None:
    log(f'Proposals are chosen among the {len(draft_ids)} most frequent ids '
        f'of the training targets (eval.draft_vocab_size).')
  decoders = spec.decoders_from_config(config.eval)
  _check_with_the_vocabulary(decoders, model.config)
  result = _report_of(config).evaluate(
      model, task, config.eval.split, decoders,
      batch_size=config.eval.batch_size,
      num_examples=config.eval.num_examples, repeats=config.eval.repeats,
      mesh=mesh, param_rules=rules, draft_vocab=draft_ids,
      rescorers=_rescorers(config.eval, model.config.vocab_size), log=log,
      **_own_options(config))
  if jax.process_index() == 0:
    _report_of(config).write(result, config, workdir, log)
  return result


def periodic(config):
  """The periodic evaluation of `train.train`: (model, task, step) ->
  {'eval/bleu', 'eval/psnr' and 'eval/ssim', or 'eval/perplexity';
  'eval/mean_block' when the model has heads}, greedy and blockwise at the
  model's k on the first eval.periodic_examples examples of eval.split."""
  mesh, task_report = _mesh(config), _report_of(config)
  quiet = lambda _: None

  def evaluate(model, task, step):
    del step  # The same examples every time.
    model, placed_mesh, rules = placement.placement(model, config, mesh,
                                                    log=quiet)
    k = model.config.num_proposal_heads
    spec = functools.partial(DecoderSpec.of, config.eval.max_len)
    decoders = [spec()] + ([spec(k)] if k > 1 else [])
    result = task_report.evaluate(
        model, task, config.eval.split, decoders,
        batch_size=config.eval.batch_size,
        num_examples=config.eval.periodic_examples, mesh=placed_mesh,
        param_rules=rules, log=quiet, **_own_options(config))
    values = task_report.training_figures(result)
    if k > 1:
      blockwise = next(row for row in result['rows']
                       if row['decoder'] == decoders[1].name)
      values['eval/mean_block'] = blockwise['mean_block']
    return values

  return evaluate


def _check_with_the_vocabulary(decoders, model_config) -> None:
  """Raises ConfigError naming the row whose options the model's
  vocabulary refuses (a top-t or top_k above it), known only once the
  vocabulary is: before any decoding, not from inside a decode."""
  for decoder in decoders:
    try:
      decoder.options.check(model_config.num_proposal_heads,
                            model_config.vocab_size,
                            drafters.dependent(model_config.head_layer))
    except ValueError as error:
      raise errors.ConfigError(
          f'config.eval: the row {decoder.name!r}: {error}') from None


def _rescorers(eval_config, vocab_size: int) -> dict | None:
  """{'ngram': the model at eval.ngram_path} for 'ngram' drafters; None
  without one.

  Raises:
    errors.DataError: the file's vocabulary is not the model's `vocab_size`
      (before any decoding).
  """
  if not eval_config.ngram_path:
    return None
  model = ngram.NgramModel.load(eval_config.ngram_path, vocab_size,
                                'eval.ngram_path')
  for drafter in eval_config.get('drafters', ()):
    try:
      decoding.Lookup.from_spec(drafter).check_order(model.order)
    except ValueError as error:
      raise errors.ConfigError(
          f'eval.drafters with eval.ngram_path: {error}') from None
  return {'ngram': model}


def _report_of(config) -> Report:
  return REPORTS[tasks.get(config.task.name).kind]


def _own_options(config) -> dict:
  """The arguments of config.eval that one kind's report alone takes: the
  language model's perplexity budget."""
  if _report_of(config) is lm:
    return dict(perplexity_tokens=config.eval.perplexity_tokens)
  return {}


def _mesh(config) -> jax.sharding.Mesh:
  return sharding.make_mesh(config.mesh.shape, config.mesh.axes)
