"""Fake `nltk.metrics.distance`: the Levenshtein distance test.py's validation uses."""


def edit_distance(s1, s2, *args, **kwargs):
    prev = list(range(len(s2) + 1))
    for i, a in enumerate(s1, 1):
        cur = [i]
        for j, b in enumerate(s2, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a != b)))
        prev = cur
    return prev[-1]
