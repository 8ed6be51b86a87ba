"""Operator commands and signals: bootstrap, redrive, health checks and metrics."""
