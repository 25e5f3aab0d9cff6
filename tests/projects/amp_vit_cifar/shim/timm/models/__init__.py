"""timm.models (names only)."""
