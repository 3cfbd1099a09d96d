from textutil import slugify


def test_simple_words():
    assert slugify("Hello World") == "hello-world"


def test_punctuation_is_dropped():
    assert slugify("Hello, World!") == "hello-world"


def test_runs_of_spaces_collapse():
    assert slugify("  many   spaces here ") == "many-spaces-here"
