"""Language-model tasks: a prompt, and the continuation a decoder-only model
writes after it.

- python_source.py: a code language model on the Python standard library's
  own source (no download).
- text_files.py: a folder of text or code files (or one file).
- jsonl_prompts.py: prompts from a JSONL file, continued by the model
  itself (the distill job) before its heads train on them.
- tfds_lm.py: Kim et al.'s datasets through TFDS (language modelling,
  summarisation, question answering) as prompt -> continuation.
- task.py: the LMTask they load, and what they share: the vocabulary by
  vocab_type, chunking, the held-out split, the model check, distilled
  corpora.
"""
