"""TFDS builders shared by the TFDS text and image tasks, read without TF.

Opening a prepared dataset and checking its split names, with messages that
give the `tfds build` command when the data is missing. tensorflow_datasets
is imported only when a TFDS task is used.
"""

import contextlib
import os
import re
from collections.abc import Sequence

# Splits of a dataset whose prepared info is not at hand (TFDS mock data).
STANDARD_SPLITS = ('train', 'validation', 'test')


def import_tfds():
  """tensorflow_datasets, with the builders the tasks read registered.

  Without h5py the builder registry stops importing early and
  'wmt14_translate' is "not found"; importing the translate package
  registers it, and the text, summarisation and question
  answering packages register lm1b, c4, cnn_dailymail, xsum and squad.
  """
  import tensorflow_datasets as tfds
  # noqa: F401 below: imported for the builders they register.
  import tensorflow_datasets.question_answering  # noqa: F401
  import tensorflow_datasets.summarization  # noqa: F401
  import tensorflow_datasets.text  # noqa: F401
  import tensorflow_datasets.translate  # noqa: F401
  return tfds


def build_command(dataset: str, data_dir: str) -> str:
  return (f'tfds build {dataset} --data_dir={data_dir} '
          f'--file_format=array_record')


def open_builder(dataset: str, data_dir: str, check_dir: bool = True):
  """The TFDS builder of `dataset` ('name/config'), prepared in `data_dir`.

  Raises:
    FileNotFoundError: data_dir does not exist, or the dataset is not
      prepared there (the message gives the `tfds build` command).
    ValueError: no such TFDS dataset or builder config.
  """
  if check_dir and (not data_dir or not os.path.isdir(data_dir)):
    raise FileNotFoundError(
        f'TFDS data dir task.data_dir={data_dir!r} does not exist. Prepare '
        f'the data there first: {build_command(dataset, data_dir or "DIR")}')
  tfds = import_tfds()
  try:
    builder = tfds.builder(dataset, data_dir=data_dir)
  except (tfds.core.registered.DatasetNotFoundError, ValueError) as error:
    first_line = str(error).splitlines()[0]
    raise ValueError(f'task.dataset={dataset!r} is not a TFDS dataset: '
                     f'{first_line}') from None
  prepared = os.path.join(data_dir, builder.info.full_name)
  if check_dir and not os.path.isdir(prepared):
    raise FileNotFoundError(
        f'{dataset} is not prepared in {data_dir} (no {prepared}). Prepare '
        f'it with: {build_command(dataset, data_dir)}')
  return builder


def check_splits(builder, splits: Sequence[str]) -> None:
  """Raises ValueError for a split the dataset does not have."""
  known = tuple(builder.info.splits) or STANDARD_SPLITS
  for split in splits:
    if re.sub(r'\[.*\]$', '', split) not in known:
      raise ValueError(f'split {split!r} is not one of {builder.name}\'s '
                       f'splits {known}.')




@contextlib.contextmanager
def opened(dataset: str, data_dir: str, splits: Sequence[str],
           mock_examples: int = 0):
  """The dataset's builder, its splits checked, inside TFDS mock data when
  `mock_examples` > 0 (that many random examples a split, no data dir).

  Sources opened inside the `with` keep serving mock data after it.

  Raises:
    FileNotFoundError: data_dir does not exist, or the dataset is not
      prepared there (the message gives the `tfds build` command).
    ValueError: no such TFDS dataset, builder config or split.
  """
  tfds = import_tfds()
  mock = (tfds.testing.mock_data(num_examples=mock_examples,
                                 policy=tfds.testing.MockPolicy.USE_CODE)
          if mock_examples else contextlib.nullcontext())
  with mock:
    builder = open_builder(dataset, os.path.expanduser(data_dir),
                           check_dir=not mock_examples)
    check_splits(builder, list(splits))
    yield builder
