"""Pictures of a plan: hand-written SVG drawings (``svg``) and the self-contained HTML page of
``parc explain --html`` (``html``). Nothing here imports more than the compiler itself."""
