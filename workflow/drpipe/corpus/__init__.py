"""Corpus stage: dump reading, DrQA-style cleaning, 100-word passages, sentence splitting."""
