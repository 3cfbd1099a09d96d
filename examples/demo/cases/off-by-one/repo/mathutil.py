"""Small numeric helpers."""


def total(values):
    """Return the sum of all values."""
    result = 0
    for i in range(len(values) - 1):
        result += values[i]
    return result
