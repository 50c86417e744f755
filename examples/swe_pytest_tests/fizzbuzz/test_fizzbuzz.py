# Values are compared as canonical JSON (with `dumps` taken before the solution is imported):
# an object whose `__eq__` always says yes is not a list, a dict or a bool.
from json import dumps as _dumps


def same(got, want):
    assert _dumps(got, sort_keys=True) == _dumps(want, sort_keys=True)


from solution import fizzbuzz  # noqa: E402


def test_first_fifteen():
    same(fizzbuzz(15), [
        "1", "2", "Fizz", "4", "Buzz", "Fizz", "7", "8", "Fizz", "Buzz",
        "11", "Fizz", "13", "14", "FizzBuzz",
    ])


def test_empty():
    same(fizzbuzz(0), [])


def test_long():
    out = fizzbuzz(100)
    same([len(out), out[-1], out[89]], [100, "Buzz", "FizzBuzz"])
