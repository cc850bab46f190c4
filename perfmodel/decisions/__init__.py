"""Decisions layer: SLA step limits, sensitivity, secondary factors and the serving simulator.

Imports the statistics, core and data layers and the root helpers, nothing above.
"""
