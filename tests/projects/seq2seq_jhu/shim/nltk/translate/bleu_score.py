"""`corpus_bleu(list_of_references, hypotheses)`: corpus-level BLEU-4 with uniform
weights and the brevity penalty, as nltk computes it without smoothing (0.0 when a
precision is zero). Only logged by the script; no value of the comparison depends on it."""

from __future__ import annotations

import math
from collections import Counter


def _ngrams(words, n):
    return Counter(tuple(words[i:i + n]) for i in range(len(words) - n + 1))


def corpus_bleu(list_of_references, hypotheses, weights=(0.25, 0.25, 0.25, 0.25),
                smoothing_function=None, auto_reweigh=False):
    matched = [0] * len(weights)
    total = [0] * len(weights)
    hyp_len = ref_len = 0
    for references, hypothesis in zip(list_of_references, hypotheses, strict=True):
        hyp_len += len(hypothesis)
        ref_len += min((len(r) for r in references),
                       key=lambda n: (abs(n - len(hypothesis)), n), default=0)
        for k in range(len(weights)):
            counts = _ngrams(hypothesis, k + 1)
            best: Counter = Counter()
            for reference in references:
                best |= _ngrams(reference, k + 1)
            matched[k] += sum(min(c, best[g]) for g, c in counts.items())
            total[k] += max(len(hypothesis) - k, 0)
    if hyp_len == 0 or any(m == 0 for m in matched):
        return 0.0
    logs = (w * math.log(m / t) for w, m, t in zip(weights, matched, total, strict=True))
    score = math.exp(sum(logs))
    penalty = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
    return penalty * score
