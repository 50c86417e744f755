"""Fetches files with huggingface_hub's own `hf_hub_download`, so the cache is laid out exactly
as Python tools lay it out (HF_ENDPOINT / HF_HUB_CACHE / HF_HUB_OFFLINE come from the
environment).

usage: populate.py '[[repo_id, repo_type, revision, filename], ...]'
prints the local paths as a JSON list.
"""

import json
import sys

from huggingface_hub import hf_hub_download

paths = [
    hf_hub_download(repo_id=repo, repo_type=kind, revision=revision, filename=name)
    for repo, kind, revision, name in json.loads(sys.argv[1])
]
print(json.dumps(paths))
