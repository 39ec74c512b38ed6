"""Foundations every layer uses: errors, structured logs, call timing, metrics."""
