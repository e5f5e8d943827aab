"""The Study report: arms x seeds of one Experiment, read back from MLflow and compared.

``stats`` holds the interval arithmetic over seeds (pure numpy/scipy), ``history`` reads a Study's
nested MLflow runs and summarizes each run, ``aggregate`` aggregates them per arm and pairs each
arm with the reference arm, ``flags`` flags reward hacking, ``render`` writes the numbers as text,
and ``report`` ties these together and writes ``summary.json``, ``report.md`` and ``curves.png``
(drawn by ``plot``). Called by ``sarl study report`` (:mod:`sarl.cli.study`) and by the local
Study runner at the end of a Study. Nothing is imported here, so importing the package is free.
"""
