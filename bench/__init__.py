"""Benchmarks (`make bench` / `python -m bench`): not tests; they print figures beside targets."""
