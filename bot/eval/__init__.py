"""Eval: run written incident cases through the real runtime and score what it found (`opsloop eval`).

case.py    a case folder (evals/<case>/case.yaml and its fixture files), read and checked
world.py   the case's world: the real tools' schemas and gate, answered from fixtures; the people
script.py  the scripted model that plays a case's golden or bad script
runner.py  one case on one model: the real run loop (bot.run.loop) against that world, in a throwaway store
score.py   the deterministic checks, each named, and the optional judge
report.py  the table, the JSON, the HTML page and the baseline comparison
add.py     `opsloop eval add RUN_ID DIR`: a stored run as a case skeleton
cli.py     `opsloop eval`
"""
