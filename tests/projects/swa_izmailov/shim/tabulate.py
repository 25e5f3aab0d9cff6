"""Stand-in for `tabulate` (not installed here): the one call train.py makes,
`tabulate([values], columns, tablefmt='simple', floatfmt='8.4f')`, as three or more
lines (header, rule, one line per row), which train.py splits and indexes."""


def _cell(value, floatfmt):
    if value is None:
        return ""
    if isinstance(value, float):
        return format(value, floatfmt)
    return str(value)


def tabulate(rows, headers=(), tablefmt="simple", floatfmt="g"):
    cells = [[_cell(v, floatfmt) for v in row] for row in rows]
    widths = [max([len(str(h))] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(str(h).rjust(w) for h, w in zip(headers, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)
