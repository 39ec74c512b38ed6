"""Benchmarks of the driver against its physical floor (`make bench`, `python -m bench`)."""
