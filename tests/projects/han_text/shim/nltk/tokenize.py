"""The two tokenizers utils.py builds at import: whitespace and full-stop splitting."""


class PunktSentenceTokenizer:
    def tokenize(self, text):
        return [s.strip() for s in text.split(".") if s.strip()]


class TreebankWordTokenizer:
    def tokenize(self, text):
        return text.split()
