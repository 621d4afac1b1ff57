"""Replay (busched.replay): recording, export, history, scale, recorded explanations."""
