"""Test and benchmark machinery shared by `tests/` and `bench/`: a restartable dev server
(`server`), a fleet of worker processes (`fleet`), a recording HTTP server (`recorder`) and
the chaos run with its checks (`chaos`). Not used by the product at run time."""
