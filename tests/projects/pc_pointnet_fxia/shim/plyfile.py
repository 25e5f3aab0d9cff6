"""Stand-in for the `plyfile` package, imported at the top of pointnet/dataset.py.

Only ModelNetDataset reads .ply files; the ShapeNet run (`--dataset_type shapenet`)
never calls them, so the names only have to exist.
"""


class PlyData:
    @classmethod
    def read(cls, stream):
        raise NotImplementedError("pc_pointnet_fxia's plyfile shim reads no .ply file")


class PlyElement:
    pass
