"""A fake scikit-learn for the Skip-gram notebook (not installed here): only
`sklearn.manifold.TSNE`, which the notebook uses to plot the embeddings after training."""
