"""A stand-in for scikit-learn (not installed here): codes/model.py imports
`average_precision_score`, used only for the Countries data sets (`--countries`), which
this project does not run."""
