"""Text tasks: translation pairs and their vocabularies.

- embedded.py: the built-in generated translation task (no download).
- parallel_text.py: aligned plain-text files (Multi30k, a distilled corpus).
- tfds_translation.py: a TFDS translation dataset (WMT14 En->De).
- task.py: the TextTask they load; vocab.py: word and SentencePiece
  vocabularies; hf_vocab.py: a Hugging Face checkpoint's tokenizer.json,
  with that checkpoint's own ids (Llama, Mistral, Qwen2, GPT-2: the
  language-model tasks' vocab_type 'hf').
"""
