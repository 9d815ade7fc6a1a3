"""Evaluation job: restore the latest checkpoint and compare decoders.

    python -m bpd_jax.evaluate --config=configs/demo.py --workdir=/tmp/bpd_demo

Decodes the config's eval split greedily and blockwise (eval.ks, criteria,
min_block), prints a one-screen table and writes
WORKDIR/eval_<split>.json: BLEU (sacreBLEU on detokenized output, with its
signature), mean accepted block size, model calls, wall-clock, speedup over
greedy and the fraction of outputs identical to greedy's. For an image task
(configs/sr_demo.py, configs/celeba_sr.py) the report is
bpd_jax/evaluation/image.py's: PSNR/SSIM, mean accepted block, time per
image, WORKDIR/sr_<split>.json and the image grid sr_<split>.png.
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
