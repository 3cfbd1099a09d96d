"""Prefect flows and the ``tribunal`` CLI that starts them.

Importing this package does not import Prefect: read-only commands must stay fast.
"""
