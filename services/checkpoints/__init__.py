"""Checkpoint service: the checkpoint path of ARCHITECTURE.md (catalog, verified commit,
retention, tier-down and pre-warm, the SDK). See README.md."""
