"""The engine: bundles of same-shape runs, device choice, Ray dispatch. Knows no paper."""
