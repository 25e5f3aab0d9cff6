"""nltk stand-in for mt_simple: prepare_data.py imports `word_tokenize` only.

The fake corpus (make_pairs_data.py) holds lowercase words and letters separated by
single spaces, no punctuation: nltk's tokenizer would split it on the spaces too."""


def word_tokenize(text, language="english", preserve_line=False):
    return text.split()
