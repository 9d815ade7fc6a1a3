"""Evaluation job: restore the latest checkpoint and compare decoders.

    python -m bpd_jax.evaluate --config=configs/demo.py --workdir=/tmp/bpd_demo

Restores the newest intact step of WORKDIR/checkpoints (a line names it:
"Restored step 2000 from WORKDIR/checkpoints."), decodes the config's eval
split greedily and with every decoder of config.eval (eval.ks, criteria,
min_block, samplers), eval.repeats timed rounds, and prints and writes
the report the task's kind picks (`evaluation/reports.py`): for
translation WORKDIR/eval_<split>.json with BLEU, mean accepted block,
model calls, wall-clock, speedup over greedy and the fraction of outputs
identical to greedy's; for a language model the same rows beside
perplexity (over eval.perplexity_tokens tokens of the split); for
super-resolution PSNR/SSIM, WORKDIR/sr_<split>.json and the image grid
sr_<split>.png.
"""

from absl import flags

from bpd_jax import evaluation
from bpd_jax import jobs

flags.adopt_module_key_flags(jobs)  # --help lists --config, --workdir.


def main(argv):
  job = jobs.setup(argv, init='checkpoint')
  evaluation.report(job.config, job.workdir, job.model, job.task)


if __name__ == '__main__':
  jobs.run(main)
