"""scikit-learn hidden from this notebook: it draws its layer with TSNE only when
sklearn imports (`try: from sklearn.manifold import TSNE ... except: HAS_SK = False`),
and its `TSNE(..., n_iter=5000)` predates scikit-learn 1.7, which the test environment
installs for other tests. Without sklearn the notebook runs as it does on a machine
without it, as it did here before."""

raise ImportError("sklearn is hidden for this project (see this file)")
