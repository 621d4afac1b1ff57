"""The live cache: cluster objects entering as add/update/delete events, and per-cycle snapshots."""
