"""Measurement you can defend (SPEC §14): intervals, paired comparisons, the admitted slice, claim coordinates.

Plain functions over counts and plans -- no registry, no Prefect -- so every
number a report prints can be checked against a textbook formula. The exact
tests and the bootstrap come from scipy, not from code of ours.
"""
