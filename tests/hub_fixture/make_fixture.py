"""Builds the source files of the hub tests' fixture repositories.

usage: make_fixture.py OUT_DIR CHAT_TEMPLATE_CONFIG

* OUT_DIR/tokenizer/: a tiny byte-level BPE trained here with the `tokenizers` package
  (tokenizer.json) and a tokenizer_config.json carrying the chat template and special tokens
  of CHAT_TEMPLATE_CONFIG (the repository's built-in ChatML template with Hermes tool calls).
* OUT_DIR/tokenizer-jinja/: the same tokenizer with the template in chat_template.jinja, as
  newer repositories ship it.
* OUT_DIR/frames.parquet: FRAMES-shaped rows (Unnamed: 0, Prompt, Answer, reasoning_types,
  wiki_links) written with pyarrow (snappy, its default).
* OUT_DIR/qa-train.parquet, OUT_DIR/qa-test.parquet: prompt/answer rows, zstd-compressed.
* OUT_DIR/gsm8k-CONFIG-SPLIT.parquet for CONFIG main (6 train, 2 test rows) and socratic
  (4 train, 2 test rows): question/answer rows shaped like openai/gsm8k's two configs, whose
  answers end in `#### N` (socratic answers interleave `Sub-question? **` steps).
"""

import json
import pathlib
import sys

import pyarrow as pa
import pyarrow.parquet as pq
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

out = pathlib.Path(sys.argv[1])
config = json.loads(pathlib.Path(sys.argv[2]).read_text())
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

corpus = [
    "Create a file called greeting.txt in your home directory containing Hello from Hermes Agent.",
    "Write the numbers one to five, one per line, to count.txt and then check the file.",
    "Research the following question using web_search and web_extract. Consult at least two sources.",
    "Answer in two to four sentences and cite the URLs you used. Question: which planet has the most moons?",
    "You may call functions. The terminal tool runs a shell command and returns its output.",
    "system user assistant tool tool_call arguments command name content echo cat ls home",
] * 20

tokenizer = Tokenizer(models.BPE())
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tokenizer.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(
    vocab_size=700,
    special_tokens=SPECIAL,
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    show_progress=False,
)
tokenizer.train_from_iterator(corpus, trainer)

tokenizer_config = {
    "tokenizer_class": "PreTrainedTokenizerFast",
    "bos_token": None,
    "eos_token": "<|im_end|>",
    "pad_token": "<|endoftext|>",
    "model_max_length": 4096,
    "added_tokens_decoder": {
        str(tokenizer.token_to_id(t)): {"content": t, "special": True} for t in SPECIAL
    },
}

plain = out / "tokenizer"
plain.mkdir(parents=True, exist_ok=True)
tokenizer.save(str(plain / "tokenizer.json"))
(plain / "tokenizer_config.json").write_text(
    json.dumps({**tokenizer_config, "chat_template": config["chat_template"]}, indent=2)
)

jinja = out / "tokenizer-jinja"
jinja.mkdir(parents=True, exist_ok=True)
tokenizer.save(str(jinja / "tokenizer.json"))
(jinja / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
(jinja / "chat_template.jinja").write_text(config["chat_template"])

n = 30
frames = pa.table(
    {
        "Unnamed: 0": list(range(n)),
        "Prompt": [f"Fixture question {i}: which river flows through city {i}?" for i in range(n)],
        "Answer": [f"River {i}" for i in range(n)],
        "reasoning_types": ["Multiple constraints" if i % 2 else "Temporal reasoning" for i in range(n)],
        "wiki_links": [json.dumps([f"https://en.wikipedia.org/wiki/City_{i}"]) for i in range(n)],
    }
)
pq.write_table(frames, out / "frames.parquet")

for split, rows in [("train", 5), ("test", 3)]:
    table = pa.table(
        {
            "prompt": [f"{split} prompt {i}" for i in range(rows)],
            "answer": [i * 10 for i in range(rows)],
        }
    )
    pq.write_table(table, out / f"qa-{split}.parquet", compression="zstd")

for config, sizes in [("main", {"train": 6, "test": 2}), ("socratic", {"train": 4, "test": 2})]:
    for split, rows in sizes.items():
        step = "How many apples are there? ** " if config == "socratic" else ""
        table = pa.table(
            {
                "question": [f"{config} {split} question {i}: how many apples?" for i in range(rows)],
                "answer": [f"{step}There are {i} + 1 = <<{i}+1={i + 1}>>{i + 1} apples.\n#### {i + 1}" for i in range(rows)],
            }
        )
        pq.write_table(table, out / f"gsm8k-{config}-{split}.parquet")
