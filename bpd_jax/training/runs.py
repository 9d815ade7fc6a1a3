"""Opening a run: its task and its model's config, checked against the
workdir before any weights are read or any step runs.

The training job (`train.train`) and every job that reads a run
(`jobs.load`: evaluate, bench, drafts, distill) open it here, so that each
takes the same steps in the same order.
"""

import jax

from bpd_jax import tasks
from bpd_jax.infra import workdir as workdir_lib
from bpd_jax.models import factory


def open_run(config, workdir: str, job: str, init: str | None, log=print):
  """(task, model config) of the run in `workdir`, checked.

  In order: the task is loaded (a missing vocabulary trained, except by a
  job that reads a checkpoint: that vocabulary is the run's), checked
  against the config (`tasks.check_loaded`), its vocabulary compared with
  the run's record (the training job records it at the first start, and
  compares a warm start's too), and the model config built from the
  config and the vocabulary's size, its special ids checked against the
  vocabulary's (`factory.check_special_ids`).

  Args:
    config: a checked config.
    workdir: the run's directory: its vocabulary and config record.
    job: the job as its command names it (e.g. 'bpd_jax.main'), for the
      record's messages.
    init: None (the training job), 'checkpoint' (a job that reads the
      run's weights) or 'random' (random weights: no run to compare with).
    log: takes the one-line notes (a record without a vocabulary).

  Raises:
    errors.MissingFileError: a data file or a checkpoint reader's
      vocabulary is missing.
    errors.DataError: the task cannot be loaded from its data.
    errors.WorkdirError: the vocabulary is not the run's (or the warm
      start's), or the record cannot be read or written.
    errors.ConfigError: the config's special ids are not the vocabulary's.
  """
  task = tasks.load_task(config.task, workdir,
                         train_vocab=init != 'checkpoint')
  tasks.check_loaded(config, task)
  training = init is None
  if init != 'random':  # Random weights have no run to compare with.
    workdir_lib.check_vocabulary(task.vocab, workdir, job, training=training,
                                 log=log, write=jax.process_index() == 0)
  if training and config.train.init_from:
    workdir_lib.check_warm_start_vocabulary(task.vocab,
                                            config.train.init_from)
  model_config = factory.model_config_from(config, task.vocab.vocab_size)
  factory.check_special_ids(model_config, task.vocab)  # Before any weights.
  return task, model_config
