# The solution runs in a child interpreter through `hermes_call` (this process never imports it,
# so it cannot patch pytest); its values come back as JSON data and are compared canonically.
from json import dumps as _dumps


def same(got, want):
    assert _dumps(got, sort_keys=True) == _dumps(want, sort_keys=True)


from hermes_call import load  # noqa: E402

fizzbuzz = load("solution").fizzbuzz


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
