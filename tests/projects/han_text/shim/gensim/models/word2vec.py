"""gensim.models.word2vec.Word2Vec: a name only (utils.train_word2vec_model is not run)."""


class Word2Vec:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("han_text's fake gensim trains no word2vec model")
