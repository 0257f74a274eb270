"""Renderers: one module per output format. They take what the library computed (check
results, estimates, search results, run reports) and return text; the commands print it.

* ``diagnostics/``: ``text`` (terminal, with source snippets; check's and lint's summaries),
  ``json``, ``sarif`` (code scanning), ``github`` (workflow annotations); ``ci`` names the two
  CI formats together;
* ``explain`` (text and JSON) and ``html`` (the explain page), ``svg`` (the drawings);
* ``plan`` (the planner's ranked table), ``presets``, ``compile``, ``run``, ``fmt``;
* ``term``: colour and aligned tables for every terminal renderer.

Numbers go through ``parc.units`` (a foundation module, so the rules' messages use it too).
A new output format is one module here; the command that offers it only picks it.
"""
