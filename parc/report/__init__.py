"""Renderers: one module per output format, one number formatter."""
