"""A requirement that only the job's setup.py brings."""

SCALE = 16.0
