"""Local mode's embedded store: its state in one SQLite database file."""
