"""nltk.translate: only bleu_score (see nltk/__init__.py)."""
