"""The draft job's figure: confidence by head, oracle headroom, refinement."""

from bpd_jax.infra import figures


def write(report: dict, path: str):
  """Three panels: head confidence and accuracy by head position; oracle
  top-t block efficiency against t per k; block efficiency and wall-clock
  speedup of each refinement over plain blockwise decoding."""
  fig, axes = figures.pyplot().subplots(1, 3, figsize=(16, 4.5))
  conf = report['analysis']['confidence']
  heads = range(1, len(conf['mean_max_prob']) + 1)
  axes[0].plot(heads, conf['mean_max_prob'], 'o-', label='mean max prob')
  axes[0].plot(heads, conf['accuracy'], 's--', label='argmax = greedy token')
  axes[0].set(xlabel='head (1 = scoring model)', ylim=(0, 1.02),
              title='Head confidence by position')
  axes[0].legend()

  for k, stats in report['analysis']['per_k'].items():
    oracle = stats['oracle_block_efficiency']
    ts = sorted(oracle, key=int)
    axes[1].plot([int(t) for t in ts], [oracle[t] for t in ts], 'o-',
                 label=f'k={k} oracle top-t')
  rows = report['compare']['rows']
  for row in rows:
    if row['refinement'] and row['k'] > 1:
      axes[1].plot(row['top_t'], row['mean_block'], 'x', color='k')
  axes[1].plot([], [], 'x', color='k', label='refinements (measured)')
  axes[1].set(xlabel='t (tokens per head)', ylabel='tokens per call',
              xscale='log', title='Oracle top-t block efficiency')
  axes[1].legend(fontsize=8)

  refined = [r for r in rows if r['refinement']]
  names = [f"k={r['k']}\n{r['refinement']}" for r in refined]
  x = range(len(refined))
  axes[2].bar([i - 0.2 for i in x], [100 * r['block_gain'] for r in refined],
              0.4, label='block efficiency gain %')
  axes[2].bar([i + 0.2 for i in x],
              [100 * (r['speedup_vs_plain'] - 1) for r in refined], 0.4,
              label='wall-clock gain %')
  axes[2].axhline(0, color='k', lw=0.8)
  axes[2].set_xticks(list(x), names, fontsize=6, rotation=60)
  axes[2].set(title='Refinement vs plain blockwise (same k)')
  axes[2].legend(fontsize=8)
  fig.tight_layout()
  figures.save(fig, path, dpi=110)
