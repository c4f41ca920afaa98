"""The cache-directory model: naming rules, cheap Arrow reads and the scan (no typer, no rich)."""
