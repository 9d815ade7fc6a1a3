"""The report of a config's task: the one the jobs print and train logs.

A translation task gets the BLEU report (`text.py`), an image task the
super-resolution report (`image.py`), a language-model task the perplexity
report (`lm.py`), each after training (main job), on
a restored run (evaluate job) and, shortened, every eval.every training
steps (`periodic`, the callback `train.train` is given).
"""

from bpd_jax import tasks
from bpd_jax.evaluation import image
from bpd_jax.evaluation import lm
from bpd_jax.evaluation import placement
from bpd_jax.evaluation import text
from bpd_jax.evaluation.spec import DecoderSpec
from bpd_jax.infra import sharding


def report(config, workdir: str, model, task, log=print) -> dict:
  """Prints the task's report of config.eval and writes it to `workdir`."""
  report_fn = dict(image=image.report, lm=lm.report, text=text.report)[
      _kind(config)]
  return report_fn(config, workdir, model, task, log=log)


def periodic(config):
  """The periodic evaluation of `train.train`: (model, task, step) ->
  {'eval/bleu', 'eval/psnr' and 'eval/ssim', or 'eval/perplexity';
  'eval/mean_block' when the model has heads}, greedy and blockwise at the
  model's k on the first eval.periodic_examples examples of eval.split."""
  mesh = sharding.make_mesh(config.mesh.shape, config.mesh.axes)

  def evaluate(model, task, step):
    del step  # The same examples every time.
    model, placed_mesh = placement.placement(model, config, mesh,
                                             log=lambda _: None)
    k = model.config.num_proposal_heads
    decoders = [DecoderSpec()] + ([DecoderSpec(k)] if k > 1 else [])
    options = dict(batch_size=config.eval.batch_size,
                   num_examples=config.eval.periodic_examples,
                   mesh=placed_mesh, log=lambda _: None)
    if _kind(config) == 'image':
      rows = image.evaluate(model, task, config.eval.split, decoders,
                            **options)['rows'][1:]  # After bicubic's row.
      values = {'eval/psnr': rows[0]['psnr'], 'eval/ssim': rows[0]['ssim']}
    elif _kind(config) == 'lm':
      result = lm.evaluate(model, task, config.eval.split, decoders,
                           max_len=config.eval.max_len, **options)
      rows = result['rows']
      values = {'eval/perplexity': result['perplexity']}
    else:
      rows = text.evaluate(model, task, config.eval.split, decoders,
                           max_len=config.eval.max_len, **options)['rows']
      values = {'eval/bleu': rows[0]['bleu']}
    if k > 1:
      values['eval/mean_block'] = rows[1]['mean_block']
    return values

  return evaluate


def _kind(config) -> str:
  return tasks.get(config.task.name).kind
