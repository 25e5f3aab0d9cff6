"""A fake `azureml` (azureml-core is not installed): what pytorch_train.py uses."""
