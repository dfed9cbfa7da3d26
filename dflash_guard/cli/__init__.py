"""Command modules: each parses its arguments, calls the library, renders, returns an exit code."""
