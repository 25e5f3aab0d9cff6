"""A fake scipy for meta_maml: miniimagenet_train.py imports `scipy.stats` at the top
for mean_confidence_interval(), which main() never calls."""
