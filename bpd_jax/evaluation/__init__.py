"""One evaluation harness: decoder specs, the interleaved runner, reports.

- `spec.DecoderSpec`: one decoder (greedy, blockwise, refined, sampled);
  `spec.AutoSpec`: k='auto' with its tuning.
- `runner.run`: compile every spec, then time them side by side over the
  same batches; `runner.gather`: the real rows' outputs.
- The reports on top, one per task kind, each a `reports.Report`: `text.py`
  (BLEU), `image.py` (PSNR/SSIM) and `lm.py` (perplexity); `reports.py`
  picks the task's and runs what they share (`report`, and `periodic`
  during training); `outputs.py` writes and prints them. The bench
  (`bpd_jax/bench/runner.py`) and the drafts comparison
  (`bpd_jax/drafts/compare.py`) call the same runner.
"""

from bpd_jax.evaluation.reports import periodic, report
from bpd_jax.evaluation.runner import Measurement, Outputs, gather, run
from bpd_jax.evaluation.spec import DecoderSpec

__all__ = ['DecoderSpec', 'Measurement', 'Outputs', 'gather', 'periodic',
           'report', 'run']
