"""Fake data of names_rnn_scratch (run in the run folder):
intermediate_source/data/names/LANGUAGE.txt, one
name a line, as the tutorial's data.zip holds them.

Four languages of six made-up names each (Italian among them: the tutorial prints
`category_lines['Italian'][:5]`), one accented name so unicodeToAscii has work to do;
the names are fixed, so both runs read the same files."""

from __future__ import annotations

from pathlib import Path

NAMES = {
    "Italian": ["Abandonato", "Abatangelo", "Bellini", "Caruso", "Donati", "Ferrari"],
    "German": ["Abbing", "Bauer", "Dreschner", "Fischer", "Hahn", "Schmidt"],
    "Japanese": ["Abe", "Fujita", "Hayashi", "Ito", "Kato", "Suzuki"],
    "Polish": ["Adamczak", "Nowak", "Sokołowski", "Wojcik", "Zielinski", "Kowal"],
}


def main() -> None:
    folder = Path("intermediate_source/data/names")
    folder.mkdir(parents=True, exist_ok=True)
    for language, names in NAMES.items():
        (folder / f"{language}.txt").write_text("\n".join(names) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
