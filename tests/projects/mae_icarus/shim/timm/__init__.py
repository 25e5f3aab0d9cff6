"""A stand-in for timm 0.4.12 (not installed here): only what IcarusWizard/MAE's model.py
imports, `timm.models.layers.trunc_normal_` and `timm.models.vision_transformer.Block`."""
