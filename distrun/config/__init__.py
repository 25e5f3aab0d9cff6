"""The launch config (`distrun.yaml`): schema and defaults, loading with line numbers,
validation, and exports to torchrun, accelerate, SLURM and Kubernetes."""
