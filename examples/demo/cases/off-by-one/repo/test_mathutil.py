from mathutil import total


def test_total_of_several_values():
    assert total([1, 2, 3]) == 6


def test_total_of_one_value():
    assert total([5]) == 5


def test_total_of_nothing():
    assert total([]) == 0
