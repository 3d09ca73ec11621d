"""Presentation: console tables (rich) and the self-contained HTML report (plotly)."""
