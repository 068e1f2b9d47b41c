"""Analysis of sweep results: scaling-law fits and verdicts against theory."""
