"""Crucible's test harness: runs subjects (corpus entries, generated graphs, minimizer cases) through
graph compilers and grades them.

Read in this order:
  engine.py   one subject on one target: build, eager x2, float64 reference, capture, compile, run,
              compare, checks; one error classifier (errors.py); the simulator's checks on crucible-sim
  result.py   the Result record: its fields define the store's columns and every export
  status.py   the status taxonomy (what counts against the compiler) and the phases
  targets.py  eager, crucible-* and Dynamo-backend targets: validated once, one compile function
  entry_subject.py  a corpus entry as a subject (model copies, train mode, dynamic sizes, capture)
  tasks.py / pool.py / worker_process.py  picklable tasks on isolated workers: deadlines, memory
              limits, crash/hang/OOM results
  runner.py   one run: resume, metadata, progress, storing results as they arrive
  cli.py      the ``crucible`` command; selection.py (which entries), validation.py (every setting
              checked before work starts), expected.py (expected-results files)
  store.py    the SQLite results store: schema version, migration, JSON export, merge
  oracle.py   the parity oracle (fp64 reference, RMSE ratio vs eager, cosine fallback, no TF32)
  capture.py  graphs, graph breaks (Dynamo's types) and capture coverage
  report.py / html_report.py / junit.py / diff.py / reproduce.py   what a run says, for people and CI
  fuzz/, minify/, corpus_check.py, pytest_plugin.py   the other ways in, on the same engine
  mutate/     crucible mutate: mutation analysis of a compiler (mutants fuzzed in isolation)
  bench/      benchmark scripts (they may import every layer)
"""
