"""The training engine: samples tasks, pins scaffold views, rolls out, reviews and updates."""
