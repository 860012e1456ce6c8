"""Crucible's test harness: runs corpus entries through graph compilers and grades them.

Read in this order:
  cli.py      the ``crucible`` command (list, run, report, diff, merge, corpus check)
  runner.py   one run: selection, sharding, resume, metadata, progress
  pool.py     isolation: spawned workers, deadlines, memory limits, crash/hang/OOM records
  execute.py  one entry on one target: build, eager x2, fp64 reference, capture, compile, run
  capture.py  graphs, graph breaks (Dynamo's types) and capture coverage, measured
  oracle.py   the parity oracle (fp64 reference, RMSE ratio vs eager, cosine fallback)
  targets.py  eager, crucible-* and Dynamo-backend targets
  status.py   the status taxonomy
  store.py    the SQLite results store, JSON export, merge
  report.py / diff.py   summaries, top breaks, failure clusters; regressions between runs
"""
