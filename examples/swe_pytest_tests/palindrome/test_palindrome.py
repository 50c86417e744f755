from solution import is_palindrome


def test_plain():
    assert is_palindrome("racecar")
    assert not is_palindrome("hermes")


def test_ignores_case_spaces_and_punctuation():
    assert is_palindrome("A man, a plan, a canal: Panama!")
    assert is_palindrome("No 'x' in Nixon")


def test_empty_is_a_palindrome():
    assert is_palindrome("")
