"""A stand-in for tabulate (not installed here): `tabulate(rows)` as plain text, one row
a line (train.py prints its accuracy table with it)."""


def tabulate(tabular_data, headers=(), **kwargs):
    rows = [list(map(str, headers))] if headers else []
    rows += [[str(cell) for cell in row] for row in tabular_data]
    return "\n".join("  ".join(row) for row in rows)
