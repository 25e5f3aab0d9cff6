"""`torchvision.transforms.transforms`, the module torchvision's classes live in
(`from torchvision.transforms import transforms`, sthalles/SimCLR): the shim's classes,
which its package defines."""

from torchvision import transforms as _package

globals().update({name: value for name, value in vars(_package).items()
                  if not name.startswith("_")})
