"""The task's report: one per kind, chosen by the kind its task declares."""

import inspect

from bpd_jax import evaluation
from bpd_jax.evaluation import image
from bpd_jax.evaluation import reports
from bpd_jax.evaluation.spec import DecoderSpec
from bpd_jax.tasks import spec as task_spec

import test_evaluation_image
import train_configs


def test_every_kind_has_a_report_with_the_reports_members():
  assert sorted(reports.REPORTS) == sorted(task_spec.KINDS)
  members = {name for name, _ in inspect.getmembers(reports.Report)
             if not name.startswith('_')}
  assert members == {'evaluate', 'write', 'training_figures'}
  for kind, module in reports.REPORTS.items():
    for name in members:
      expected = inspect.signature(getattr(reports.Report, name))
      actual = inspect.signature(getattr(module, name))
      # The protocol's methods take self; a module's functions do not.
      assert list(actual.parameters) == list(expected.parameters)[1:], (
          kind, name)


def test_periodic_evaluation_of_an_image_task_reads_greedys_row():
  """An image report's first row is bicubic's: the figures must be the
  greedy decoder's and the mean block the blockwise one's."""
  config = train_configs.load_config('sr_demo', 'quick')
  config.eval.update(periodic_examples=3, batch_size=3, max_len=4 * 4 * 3)
  config.mesh.shape = (1,)
  model = test_evaluation_image.tiny_image_model()
  task = test_evaluation_image.tiny_image_task()
  values = evaluation.periodic(config)(model, task, step=10)
  rows = image.evaluate(model, task, 'validation',
                        [DecoderSpec(), DecoderSpec(4)], batch_size=3,
                        max_len=4 * 4 * 3, num_examples=3,
                        log=lambda _: None)['rows']
  assert [row['decoder'] for row in rows] == ['bicubic', 'greedy',
                                              'blockwise k=4']
  assert values == {'eval/psnr': rows[1]['psnr'],
                    'eval/ssim': rows[1]['ssim'],
                    'eval/mean_block': rows[2]['mean_block']}
