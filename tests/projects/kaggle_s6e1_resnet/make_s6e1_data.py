"""Fake Playground Series S6E1 files for s6e1_v45_resnet.py (run by the harness in the
run folder: `setup: python`): Dataset/train.csv (8 students, `id` and exam_score),
Dataset/test.csv (4, no score) and Dataset/Exam_Score_Prediction.csv (the "original" data
set, 4 rows with `student_id`), the competition's 11 feature columns. With the
descriptor's 2 folds each fold trains on 4 train rows + the 4 original rows: 8 rows, one
batch of the hard-coded 1024 (4 per rank on two processes), and validates on 4."""

from __future__ import annotations

import pathlib

import numpy as np

FOLDER = pathlib.Path("Previous Competitions/S6E1/Previous trained files/Dataset")
CHOICES = {
    "gender": ["male", "female", "other"],
    "course": ["b.sc", "b.tech", "bca", "diploma"],
    "internet_access": ["yes", "no"],
    "sleep_quality": ["poor", "average", "good"],
    "study_method": ["self-study", "group study", "online videos", "coaching"],
    "facility_rating": ["low", "medium", "high"],
    "exam_difficulty": ["easy", "moderate", "hard"],
}
COLUMNS = ["age", "gender", "course", "study_hours", "class_attendance", "internet_access",
           "sleep_hours", "sleep_quality", "study_method", "facility_rating",
           "exam_difficulty"]


def rows(rng: np.random.Generator, n: int) -> list[dict[str, object]]:
    out = []
    for _ in range(n):
        row: dict[str, object] = {
            "age": int(rng.integers(17, 25)),
            "study_hours": round(float(rng.uniform(0.5, 8.0)), 2),
            "class_attendance": round(float(rng.uniform(40, 100)), 1),
            "sleep_hours": round(float(rng.uniform(4, 9.5)), 1),
        }
        for name, values in CHOICES.items():
            row[name] = values[int(rng.integers(0, len(values)))]
        row["exam_score"] = round(20 + 6 * float(row["study_hours"])
                                  + 0.3 * float(row["class_attendance"])
                                  + float(rng.normal(0, 3)), 1)
        out.append(row)
    return out


def write(path: pathlib.Path, key: str | None, data: list[dict[str, object]],
          score: bool) -> None:
    header = ([key] if key else []) + COLUMNS + (["exam_score"] if score else [])
    with open(path, "w") as f:
        f.write(",".join(header) + "\n")
        for i, row in enumerate(data):
            values = ([str(i + 1)] if key else []) + [str(row[c]) for c in COLUMNS]
            if score:
                values.append(str(row["exam_score"]))
            f.write(",".join(values) + "\n")


rng = np.random.default_rng(0)
FOLDER.mkdir(parents=True, exist_ok=True)
write(FOLDER / "train.csv", "id", rows(rng, 8), True)
write(FOLDER / "test.csv", "id", rows(rng, 4), False)
write(FOLDER / "Exam_Score_Prediction.csv", "student_id", rows(rng, 4), True)
