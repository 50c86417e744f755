"""Decodes token-id lists with the `tokenizers` package.

usage: decode.py TOKENIZER_JSON < ids.json   (a JSON list of id lists)
prints a JSON list of texts (special tokens kept).
"""

import json
import sys

from tokenizers import Tokenizer

tokenizer = Tokenizer.from_file(sys.argv[1])
print(json.dumps([tokenizer.decode(ids, skip_special_tokens=False) for ids in json.load(sys.stdin)]))
