"""Text tasks: translation pairs and their vocabularies.

- embedded.py: the built-in generated translation task (no download).
- parallel_text.py: aligned plain-text files (Multi30k, a distilled corpus).
- tfds_translation.py: a TFDS translation dataset (WMT14 En->De).
- task.py: the TextTask they load; vocab.py: word and SentencePiece
  vocabularies; gpt2_vocab.py: a pretrained GPT-2's byte-level BPE, in the
  project's ids (infra/gpt2_ids.py, shared with models/gpt2.py).
"""
