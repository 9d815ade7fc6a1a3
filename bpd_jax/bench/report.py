"""The benchmark's outputs: bench.json, bench.md and bench.png."""

import os
import time

import jax
import tabulate

from bpd_jax.bench import runner
from bpd_jax.evaluation.spec import AutoSpec
from bpd_jax.infra import atomic_files
from bpd_jax.infra import figures

# Columns of the Markdown table (bench.json keeps them all).
TABLE_COLUMNS = (
    'batch_size', 'decoder', 'k', 'tree', 'drafter', 'criterion',
    'min_block', 'sampler',
    'wall_s',
    'tokens_per_s', 'speedup', 'mean_accepted_block', 'step_cost_1_ms',
    'step_cost_k_ms', 'step_cost_ratio', 'iteration_ms', 'fixed_ms',
    'efficiency',
    'identical_to_greedy',
    'near_tie_differences', 'quality', 'compile_s', 'memory_vs_greedy',
    'recompiles')


def markdown(rows: list[dict]) -> str:
  """The rows as a Markdown table (github pipes)."""
  return tabulate.tabulate(
      [['-' if row[c] is None else row[c] for c in TABLE_COLUMNS]
       for row in rows], headers=TABLE_COLUMNS, tablefmt='github')


# Columns of the rule sets' Markdown table (`sharded.table`; bench.json
# keeps them all).
SHARDING_COLUMNS = (
    'rules', 'batch_size', 'params_mb', 'params_vs_replicated',
    'optimizer_mb', 'optimizer_vs_replicated', 'cache_mb',
    'cache_vs_replicated', 'greedy_collectives', 'greedy_collective_bytes',
    'blockwise_collectives', 'blockwise_collective_bytes',
    'greedy_compile_s', 'blockwise_compile_s')


def sharding_markdown(rows: list[dict]) -> str:
  """The rule sets' rows as a Markdown table: per-device memory in MiB
  (the bytes of bench.json / 2**20) and collectives per loop iteration."""
  def cell(row, column):
    if column.endswith('_mb'):
      return float(f'{row[column[:-3] + "_bytes"] / 2**20:.4g}')
    return '-' if row[column] is None else row[column]
  return tabulate.tabulate(
      [[cell(row, c) for c in SHARDING_COLUMNS] for row in rows],
      headers=SHARDING_COLUMNS, tablefmt='github')


def tables(rows: list[dict], sharding_rows: list[dict] | None = None
           ) -> str:
  """bench.md: the rows' table, then the rule sets' (if any)."""
  return markdown(rows) + ('' if sharding_rows is None else
                           '\n\n' + sharding_markdown(sharding_rows))


def plot(rows: list[dict], path: str) -> None:
  """Speedup and mean accepted block against k, a line per batch size.

  Exact verification of one draft, without a minimum block nor sampling;
  k = 1 is greedy decoding, and the auto setting is a marker at the k it
  chose (at the tree's depth + 1 where it chose a tree).
  """
  figure, (left, right) = figures.pyplot().subplots(1, 2, figsize=(10, 4))
  for batch_size in sorted({row['batch_size'] for row in rows}):
    mine = [row for row in rows if row['batch_size'] == batch_size]
    line = sorted((row for row in mine if row['decoder'] != AutoSpec.kind
                   and row['criterion'] == 'exact' and row['min_block'] == 1
                   and row['sampler'] is None and row['tree'] is None
                   and row.get('drafter') is None),
                  key=lambda row: row['k'])
    ks = [row['k'] for row in line]
    drawn = left.plot(ks, [row['speedup'] for row in line], marker='o',
                      label=f'batch {batch_size}')
    right.plot(ks, [row['mean_accepted_block'] for row in line], marker='o',
               label=f'batch {batch_size}')
    for row in mine:
      if row['decoder'] == AutoSpec.kind:
        left.plot([row['k']], [row['speedup']], marker='*', markersize=14,
                  color=drawn[0].get_color(), linestyle='none')
  left.axhline(1.0, color='grey', linewidth=0.8)
  left.set(xlabel='k (1: greedy; star: auto)', ylabel='speedup over greedy',
           title='Wall-clock speedup')
  right.set(xlabel='k', ylabel='tokens per model call',
            title='Mean accepted block')
  for axes in (left, right):
    axes.legend()
    axes.grid(alpha=0.3)
  figure.tight_layout()
  figures.save(figure, path, dpi=120)


def meta(config, workdir: str, *, init: str, examples: int, repeats: int,
         seconds: float) -> dict:
  """What bench.json says of its run besides the rows: the config, the
  data, the machine, the date."""
  return dict(config=config.to_dict(), workdir=workdir, init=init,
              split=config.eval.split, examples=examples,
              max_len=config.eval.max_len, repeats=repeats,
              quality='BLEU (sacreBLEU, detokenized)',
              device=str(jax.devices()[0]), devices=jax.device_count(),
              seconds=round(seconds), date=time.strftime('%Y-%m-%d %H:%M'))


def write(rows: list[dict], meta: dict, output_dir: str,
          sharding_rows: list[dict] | None = None) -> dict[str, str]:
  """Writes bench.json (meta + rows), bench.md and bench.png; with
  `sharding_rows` (`sharded.table`), bench.json's 'sharding' and their
  table after the rows' in bench.md.

  Returns:
    {'json' | 'markdown' | 'plot': path}.
  """
  missing = [c for c in runner.COLUMNS if rows and c not in rows[0]]
  if missing:
    raise ValueError(f'rows lack columns {missing}.')
  paths = {name: os.path.join(output_dir, f'bench.{ext}')
           for name, ext in (('json', 'json'), ('markdown', 'md'),
                             ('plot', 'png'))}
  if sharding_rows is not None:
    meta = dict(meta, sharding=sharding_rows)
  atomic_files.write_json(paths['json'], dict(meta, rows=rows), indent=1)
  atomic_files.write_text(paths['markdown'],
                          tables(rows, sharding_rows) + '\n')
  plot(rows, paths['plot'])
  return paths
