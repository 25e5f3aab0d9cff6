"""A fake torchtext for nb_sentiment_rnn: only `torchtext.legacy` (data, datasets), offline."""
