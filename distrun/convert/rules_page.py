"""The rule reference page, docs/rules.md, from the registry (rules.py):

    python -m distrun.convert.rules_page > docs/rules.md
"""

from __future__ import annotations

from itertools import groupby

from distrun.convert.rules import RULES


def markdown() -> str:
    """The rule reference page (docs/rules.md), one section per family."""
    lines = ["# Rule reference", "",
             "Every change and finding of `distrun convert`'s report carries one of these "
             "ids (the JSON report's `rule`). The family is the part of the conversion "
             "that applies it. Generated from `distrun/convert/rules.py`.", ""]
    for family, rules in groupby(RULES.values(), key=lambda rule: rule.id.split(".", 1)[0]):
        lines += [f"## {family}", "", "| id | what it does or reports |", "|---|---|"]
        for rule in rules:
            blocks = " **Blocks the conversion** (exit 4) unless `--partial`." if rule.blocks \
                else ""
            lines.append(f"| `{rule.id}` | {rule.summary}{blocks} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(), end="")
