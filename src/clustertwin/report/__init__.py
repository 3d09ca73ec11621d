"""Presentation: console tables (rich) now, HTML (plotly) later."""
