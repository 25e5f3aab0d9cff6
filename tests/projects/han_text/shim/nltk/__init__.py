"""A fake nltk for han_text: utils.py imports its two tokenizers at module level
(`from nltk.tokenize import PunktSentenceTokenizer, TreebankWordTokenizer`) and builds them
there; they tokenize only in create_input_files.py's preprocessing, which the test does
not run (make_han_data.py writes the preprocessed files)."""
