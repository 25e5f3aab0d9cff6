"""A stand-in for mlflow (not installed): ELR's train.py imports it and never calls it
unless `trainer.mlflow` is true (config_tiny.json sets it false)."""


def _nothing(*args, **kwargs):
    return None


log_param = log_metric = log_params = log_metrics = start_run = end_run = _nothing
set_experiment = set_tracking_uri = log_artifact = _nothing
