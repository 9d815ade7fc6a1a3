"""Input pipelines: tasks, vocabularies, batching."""
