"""`get_tokenizer("basic_english")`: lower case, split on whitespace."""


def get_tokenizer(name: str):
    return lambda line: line.lower().split()
