"""Crucible's test harness: runs corpus entries through graph compilers and grades them.

Read in this order:
  cli.py      the ``crucible`` command (list, run, report, diff, merge, corpus check)
  runner.py   one run: selection, sharding, resume, metadata, progress
  pool.py     isolation: spawned workers, deadlines, memory limits, crash/hang/OOM records
  worker_process.py  one worker's lifecycle (spawn, log, tasks, crash/hang), shared by pool, fuzz, minify
  execute.py  one entry on one target: build, eager x2, fp64 reference, capture, compile, run
  model_runs.py  fresh model/input copies per run, seeded steps, the float64 reference runs
  errors.py   what an exception means for a record: message, OOM, compile vs run error
  capture.py  graphs, graph breaks (Dynamo's types) and capture coverage, measured
  oracle.py   the parity oracle (fp64 reference, RMSE ratio vs eager, cosine fallback, float32 without TF32)
  targets.py  eager, crucible-* and Dynamo-backend targets
  status.py   the status taxonomy
  store.py    the SQLite results store, JSON export, merge
  report.py / diff.py   summaries, top breaks, failure clusters; regressions between runs
"""
