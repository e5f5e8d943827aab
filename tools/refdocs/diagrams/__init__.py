"""The documentation site's diagrams as SVG pictures (docs/assets/diagrams/, issue 41).

Each diagram is one declarative description (:mod:`.model`: nodes and edges, or participants
and messages) in :mod:`.catalog`; :mod:`.layout` places it (pure geometry), :mod:`.draw` paints
it with matplotlib. ``make generate`` runs ``python -m tools.refdocs.diagrams``. Pictures, not
mermaid blocks: MkDocs Material loads mermaid.js from a CDN at view time, so an offline reader or
an air-gapped cluster's docs mirror would see the diagram's source text.
tests/docs/test_diagrams.py checks every committed SVG holds every label of its description.
"""
