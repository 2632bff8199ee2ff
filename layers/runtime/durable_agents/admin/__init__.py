"""What operators and the reconciler run: sweeps, retention stamping, migrations, reviews, views."""
