"""parc: a compiler for parallelism plans.

The stages, each usable on its own::

    from parc.language.parser import parse_text        # text -> syntax tree with spans
    from parc.resolve.resolver import load             # file -> resolved plan + P0 diagnostics
    from parc.rules import run_rules          # plan -> P1..P6 diagnostics
    from parc.cost import estimate                     # plan -> memory, communication, time
    from parc.api import check_file                    # all of the above for one file
"""
__version__ = "0.1.0"
