"""ootest's generic test for model-derived calls (run with a config that injects them)."""
