# The solution runs in a child interpreter through `hermes_call` (this process never imports it,
# so it cannot patch pytest); its values come back as JSON data and are compared canonically.
from json import dumps as _dumps


def same(got, want):
    assert _dumps(got, sort_keys=True) == _dumps(want, sort_keys=True)


from hermes_call import load  # noqa: E402

is_palindrome = load("solution").is_palindrome


def test_plain():
    same(is_palindrome("racecar"), True)
    same(is_palindrome("hermes"), False)


def test_ignores_case_spaces_and_punctuation():
    same(is_palindrome("A man, a plan, a canal: Panama!"), True)
    same(is_palindrome("No 'x' in Nixon"), True)
    same(is_palindrome("Was it a car or a cat I saw? No."), False)


def test_empty_is_a_palindrome():
    same(is_palindrome(""), True)
