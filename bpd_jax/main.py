"""Training job, driven by an ml_collections config file.

    python -m bpd_jax.main --config=configs/demo.py --workdir=/tmp/bpd_demo

Trains as the config says (rerunning on the same workdir resumes from the
latest checkpoint; every eval.every steps a short evaluation is logged),
then, with `eval.after_training`, decodes the eval split with greedy and
blockwise decoders and prints the comparison table (for an image task, the
super-resolution report of bpd_jax/evaluation/image.py with its image
grid).
Overrides: `--config.train.base_steps=500`; options: `--config=FILE:key=value`.
"""

from absl import flags

from bpd_jax import evaluation
from bpd_jax import jobs
from bpd_jax.training import train

flags.adopt_module_key_flags(jobs)  # --help lists --config, --workdir.


def main(argv):
  job = jobs.setup(argv)
  config = job.config
  periodic = evaluation.periodic(config) if config.eval.every else None
  try:
    model, task = train.train(config, job.workdir, evaluate=periodic)
  except train.Preempted as preempted:
    print(preempted)  # Saved; the rerun resumes. Not an error.
    return
  if config.eval.after_training:
    evaluation.report(config, job.workdir, model, task)


if __name__ == '__main__':
  jobs.run(main)
