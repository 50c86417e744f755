"""transformers' side of tests/trust_tokens.rs: renders chats with a tokenizer directory.

Usage: render.py < REQUEST.json > ANSWER.json

REQUEST: {"dir": tokenizer directory, "chats": [{"messages", "tools" (or null),
"add_generation_prompt", "chat_template" (a template name, optional)}], "texts": [text, ...]}. The tokenizer is loaded with
`AutoTokenizer.from_pretrained(dir)`, so the chat template (a string, or a list of named
templates in tokenizer_config.json) is chosen by transformers itself. ANSWER: {"chats":
[{"text", "ids"} or {"error"}], "texts": [ids, ...]} (texts encoded with add_special_tokens=False).
"""

import json
import sys

from transformers import AutoTokenizer

from reference import vllm_messages  # the same conversion the conformance test uses


def main():
    request = json.load(sys.stdin)
    tok = AutoTokenizer.from_pretrained(request["dir"])
    chats = []
    for chat in request.get("chats", []):
        try:
            text = tok.apply_chat_template(
                vllm_messages(chat["messages"]),
                tools=chat.get("tools"),
                add_generation_prompt=chat.get("add_generation_prompt", False),
                chat_template=chat.get("chat_template"),
                tokenize=False,
            )
        except Exception as e:  # the template refuses the chat
            chats.append({"error": f"{type(e).__name__}: {e}"})
            continue
        chats.append({"text": text, "ids": tok(text, add_special_tokens=False)["input_ids"]})
    texts = [tok(t, add_special_tokens=False)["input_ids"] for t in request.get("texts", [])]
    json.dump({"chats": chats, "texts": texts}, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
