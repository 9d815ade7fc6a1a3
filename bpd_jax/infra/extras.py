"""The image and plot packages: an extra, imported where first needed.

`pip install .` installs what training and decoding need; images and plots
(the image tasks, the super-resolution report, the bench's and the draft
job's figures) need matplotlib, scikit-image and Pillow as well:
`pip install 'bpd_jax[images]'` (requirements.txt installs them). The
code that uses them imports them through `load`, in the function that
needs them, so that a decode-only install imports none of them, and a job
that needs a missing one stops in one line naming the extra.
"""

import importlib
import importlib.util
from types import ModuleType

from bpd_jax.infra import errors

INSTALL = "pip install 'bpd_jax[images]'"
# The import names of the extra's packages (pyproject.toml's `images`).
PACKAGES = ('matplotlib', 'skimage', 'PIL')


def load(module: str) -> ModuleType:
  """`module` (e.g. 'skimage.metrics'), imported.

  Raises:
    errors.MissingPackageError: its package is not installed.
  """
  try:
    return importlib.import_module(module)
  except ModuleNotFoundError as error:
    raise _missing((error.name or module).split('.')[0]) from error


def require() -> None:
  """Raises errors.MissingPackageError unless every package of the extra
  is installed: a job that will need them checks before any work (found,
  not imported)."""
  for package in PACKAGES:
    if importlib.util.find_spec(package) is None:
      raise _missing(package)


def _missing(package: str) -> errors.MissingPackageError:
  return errors.MissingPackageError(
      f'{package} is not installed: images and plots need the images '
      f'extra: {INSTALL}')
