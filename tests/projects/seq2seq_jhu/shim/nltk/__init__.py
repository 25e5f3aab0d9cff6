"""A fake nltk for seq2seq_jhu: only `nltk.translate.bleu_score.corpus_bleu` (the dev
BLEU logged every --print_every steps). No nltk install, nothing downloaded."""
