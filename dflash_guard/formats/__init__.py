"""Report formats (text, JSON, SARIF 2.1.0)."""
