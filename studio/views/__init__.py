"""One widget module per panel."""
