"""What the tests (and the benchmarks) share; none of it is installed with the product.

`helpers`: in-process workers, subprocess runners, replay. `fakes`: the schedule's activity
fake. `cold_worker`: forcing the cold-worker hazard. `ledger`: the ledger tests' recording
HTTP server and worker. `server`: a restartable dev server. `fleet`: worker processes.
`recorder`: the recording HTTP server of the fleet tests and the chaos run. `chaos`: the
chaos run and its checks.
"""
