"""Figures drawn into files: matplotlib without a display, each file
written whole or not at all.

    plt = figures.pyplot()
    figure, axes = plt.subplots(1, 2)
    ...
    figures.save(figure, path, dpi=120)
"""

from types import ModuleType

from bpd_jax.infra import atomic_files
from bpd_jax.infra import extras


def pyplot() -> ModuleType:
  """matplotlib.pyplot on the 'Agg' backend (files only: no display on a
  server or in CI).

  Raises:
    errors.MissingPackageError: matplotlib is not installed (the images
      extra, `extras.py`).
  """
  extras.load('matplotlib').use('Agg')
  return extras.load('matplotlib.pyplot')


def save(figure, path: str, dpi: int) -> None:
  """Writes `figure` to `path` (its format by the extension), whole or not
  at all (`atomic_files.replacing`), and closes it, written or not."""
  try:
    with atomic_files.replacing(path) as temp:
      figure.savefig(temp, dpi=dpi)
  finally:
    pyplot().close(figure)
