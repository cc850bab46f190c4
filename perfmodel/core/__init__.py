"""Core layer: the model family and its registry, fit scales, the fitter and its results.

Imports the data layer and the root helpers, nothing above.
"""
