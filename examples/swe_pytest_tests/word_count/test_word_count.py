# Values are compared as canonical JSON (with `dumps` taken before the solution is imported):
# an object whose `__eq__` always says yes is not a list, a dict or a bool.
from json import dumps as _dumps


def same(got, want):
    assert _dumps(got, sort_keys=True) == _dumps(want, sort_keys=True)


from solution import word_count  # noqa: E402


def test_counts_case_insensitively():
    same(word_count("The cat and the hat"), {"the": 2, "cat": 1, "and": 1, "hat": 1})


def test_strips_punctuation():
    same(word_count("Hello, hello! HELLO?"), {"hello": 3})


def test_empty():
    same(word_count("   "), {})
