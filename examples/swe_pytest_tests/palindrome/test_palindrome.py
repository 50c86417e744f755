# Values are compared as canonical JSON (with `dumps` taken before the solution is imported):
# an object whose `__eq__` always says yes is not a list, a dict or a bool.
from json import dumps as _dumps


def same(got, want):
    assert _dumps(got, sort_keys=True) == _dumps(want, sort_keys=True)


from solution import is_palindrome  # noqa: E402


def test_plain():
    same(is_palindrome("racecar"), True)
    same(is_palindrome("hermes"), False)


def test_ignores_case_spaces_and_punctuation():
    same(is_palindrome("A man, a plan, a canal: Panama!"), True)
    same(is_palindrome("No 'x' in Nixon"), True)
    same(is_palindrome("Was it a car or a cat I saw? No."), False)


def test_empty_is_a_palindrome():
    same(is_palindrome(""), True)
