"""One evaluation harness: decoder specs, the interleaved runner, reports.

- `spec.DecoderSpec`: one decoder (greedy, blockwise, k='auto', refined).
- `runner.run`: compile every spec, then time them side by side over the
  same batches; `runner.gather`: the real rows' outputs.
- `text.py` (BLEU) and `image.py` (PSNR/SSIM) reports on top, chosen by
  task in `reports.py`; the bench (`bpd_jax/bench/runner.py`) and the drafts
  comparison (`bpd_jax/drafts/compare.py`) call the same runner.
"""

from bpd_jax.evaluation.reports import periodic, report
from bpd_jax.evaluation.runner import Measurement, Outputs, gather, run
from bpd_jax.evaluation.spec import DecoderSpec

__all__ = ['DecoderSpec', 'Measurement', 'Outputs', 'gather', 'periodic',
           'report', 'run']
