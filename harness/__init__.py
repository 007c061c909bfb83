"""What the tests and the benchmarks both run, outside the product and outside `tests/`.

`server`: a restartable dev server. `fleet`: worker processes. `recorder`: a recording HTTP
server. `http`: the request handler every far side builds on. `chaos`: the chaos run and its
checks. `replay`: the production replayer.
`schedule_simulation`, `ledger_simulation`: the seeded simulations of the two shells over their
cores. Importable from the repository's root, as `tests` and `bench` are; not in the wheel.
"""
