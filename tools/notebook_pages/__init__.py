"""Render the example notebooks (``examples/notebooks/*.ipynb``) as pages of the docs site.

``make notebook-pages`` (``python -m tools.notebook_pages``) executes the notebooks that run on
one machine, as a user runs them (their own parameters), and writes
``docs/tutorials/notebooks/<name>.md`` with their outputs and ``docs/assets/notebooks/*.png``.
Not part of ``make generate``: executing takes minutes. ``tests/docs/test_notebook_pages.py``
checks without executing that the pages still match the notebooks.
"""
