"""``crucible mutate``: mutation analysis of a compiler's Python sources.

Read in this order:
  operators.py  the AST mutation operators; every edit checked against the parsed tree
  tracing.py    which lines a baseline campaign executes (sys.monitoring / sys.settrace), coverage files
  analysis.py   baseline, deterministic selection, mutants on the pool or cluster, the resumable results file
  tasks.py      one mutant in isolation: a copy of the package, its own caches and campaign process
  child.py      that process: the copy first on the import path, the campaign, its findings as JSON
  command.py    the command line and the report (score, per operator, overhead, survivors with diffs)
"""
