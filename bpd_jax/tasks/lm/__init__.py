"""Language-model tasks: a prompt, and the continuation a decoder-only model
writes after it.

- python_source.py: a code language model on the Python standard library's
  own source (no download).
- tfds_lm.py: Kim et al.'s datasets through TFDS (language modelling,
  summarisation, question answering) as prompt -> continuation.
- task.py: the LMTask they load, and the model check they share.
"""
