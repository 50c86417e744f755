from solution import word_count


def test_counts_case_insensitively():
    assert word_count("The cat and the hat") == {"the": 2, "cat": 1, "and": 1, "hat": 1}


def test_strips_punctuation():
    assert word_count("Hello, hello! HELLO?") == {"hello": 3}


def test_empty():
    assert word_count("   ") == {}
