"""What the tests share; none of it is installed with the product (what the benchmarks run
too lives in `harness/`).

`helpers`: in-process workers, subprocess runners, replay. `fakes`: the schedule's activity
fake. `cold_worker`: forcing the cold-worker hazard. `ledger`: the ledger tests' recording
HTTP server, worker and set-up.
"""
