"""Chat templates, untrusted input rendered only in a sandbox: `sandbox` (the one renderer, with
its time and size budget), `locate` (where a model folder keeps its templates), `grammar` (the
static check of a template's jinja2), `cost` (its rendering cost, and the catalogue of known
templates in `known.json`). Below `scan` and `lossless`, which both use it.
"""
