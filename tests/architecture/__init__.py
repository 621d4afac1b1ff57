"""The architecture: layering contracts and import cycles."""
