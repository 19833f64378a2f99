"""The tracing harness behind validation/trace.py (see validation/README.md)."""
