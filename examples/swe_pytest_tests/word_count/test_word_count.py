# The solution runs in a child interpreter through `hermes_call` (this process never imports it,
# so it cannot patch pytest); its values come back as JSON data and are compared canonically.
from json import dumps as _dumps


def same(got, want):
    assert _dumps(got, sort_keys=True) == _dumps(want, sort_keys=True)


from hermes_call import load  # noqa: E402

word_count = load("solution").word_count


def test_counts_case_insensitively():
    same(word_count("The cat and the hat"), {"the": 2, "cat": 1, "and": 1, "hat": 1})


def test_strips_punctuation():
    same(word_count("Hello, hello! HELLO?"), {"hello": 3})


def test_empty():
    same(word_count("   "), {})
