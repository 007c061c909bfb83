"""Benchmarks: durability side by side with native Temporal Schedules and the server's floors.

Run `python -m bench` (or `make bench`); `--quick` for a ~3-4 minute subset, `--scenario NAME`
for one scenario, `--file-backed` for a dev server with a database file. Everything runs
locally: its own dev server on 127.0.0.1, in-process workers, a local HTTP server.
"""
