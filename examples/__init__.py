"""Example kernels for kcache (``python examples/main.py`` runs the main job)."""
