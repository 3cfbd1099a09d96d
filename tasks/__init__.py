"""Prefect tasks and the pure logic they wrap (candidate execution, redaction, grading, sealing)."""
