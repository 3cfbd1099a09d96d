"""A nightly series (SPEC §15): the nights of one experiment, each compared with the one before.

``compare`` pairs two nights' reports and applies the regression rule (pure);
``nights`` finds the nights in the registry and stores each night's record;
``render`` turns records into the Markdown artifact, the series listing and
its HTML trend (pure). No Prefect: ``flows/nightly.py`` wires them.
"""
