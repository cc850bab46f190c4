"""Statistics layer: residual diagnostics, adequacy, the fold engine, model comparison,
baselines, interval coverage, the bootstrap, the predictive distribution and calibration.

Imports the core and data layers and the root helpers, nothing above.
"""
