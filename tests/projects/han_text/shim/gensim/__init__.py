"""A fake gensim for han_text: `gensim.models.KeyedVectors.load(word2vec_file,
mmap='r')` (utils.load_word2vec_embeddings, called by train.py) reads the JSON that
make_han_data.py writes as `han data/word2vec_model` ({"vector_size": D, "vectors": {word:
[D floats]}}); the object has gensim 3's `vector_size`, `vocab` and `kv[word]`.
`gensim.models.word2vec.Word2Vec` is a name only (utils.train_word2vec_model, not run)."""

from . import models  # noqa: F401
