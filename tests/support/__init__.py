"""What the tests share; none of it is installed with the product (what the benchmarks run
too lives in `harness/`).

`helpers`: in-process workers, subprocess runners for the CLI and the worker, replay.
`fakes`: the schedule's activity fake. `cold_worker`: forcing the cold-worker hazard.
`ledger`: the ledger tests' recording HTTP server, worker and set-up. `schedule`: the
schedule tests' set-up. `cron_model`: an independent model of classic cron. `deployment`:
worker deployment versions and the manifests' drain bound. `browser`: the headless Chromium
of the UI tests.
"""
