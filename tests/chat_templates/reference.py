"""Reference renderings for tests/chat_template_conformance.rs, made by Hugging Face transformers.

Usage: reference.py SDIST WORKDIR INPUTS OUTPUT

Extracts the real chat templates that llama.cpp keeps under models/templates/ from the
llama-cpp-python source distribution SDIST (downloaded from PyPI by the test), trains one tiny
byte-level BPE tokenizer whose special tokens are every control token those templates use, and
writes one tokenizer directory per template under WORKDIR. Then, for every template and every
conversation in INPUTS, renders with `apply_chat_template(..., tokenize=False)`, encodes with
`add_special_tokens=False`, checks that equals `apply_chat_template(..., tokenize=True)`, and writes
{template: {conversation: {"text", "ids"} or {"error"}}} to OUTPUT.
"""

import copy
import json
import os
import re
import sys
import tarfile

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

# name -> (file under models/templates/, bos_token, eos_token)
TEMPLATES = {
    "qwen2.5": ("Qwen-Qwen2.5-7B-Instruct.jinja", None, "<|im_end|>"),
    "qwen3": ("Qwen-Qwen3-0.6B.jinja", None, "<|im_end|>"),
    "llama3.1": ("meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    "llama3.2": ("meta-llama-Llama-3.2-3B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    "hermes3": ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "<|begin_of_text|>", "<|im_end|>"),
    "mistral-nemo": ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>"),
    "deepseek-v3.1": (
        "deepseek-ai-DeepSeek-V3.1.jinja",
        "<\uff5cbegin\u2581of\u2581sentence\uff5c>",
        "<\uff5cend\u2581of\u2581sentence\uff5c>",
    ),
    "glm-4.6": ("GLM-4.6.jinja", None, "<|endoftext|>"),
    "kimi-k2": ("moonshotai-Kimi-K2.jinja", None, "<|im_end|>"),
    "gpt-oss": ("openai-gpt-oss-120b.jinja", None, "<|return|>"),
}

CONTROL = re.compile(
    r"<\|[A-Za-z0-9_.]+\|>|<\uff5c[^\uff5c]{1,40}\uff5c>|\[/?[A-Z_]{3,20}\]|</?(?:tool_call|think|tools|tool_response)>"
)


def extract(sdist):
    wanted = {f: name for name, (f, _, _) in TEMPLATES.items()}
    found = {}
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            base = os.path.basename(member.name)
            if "/models/templates/" in member.name and base in wanted:
                found[wanted[base]] = tar.extractfile(member).read().decode("utf-8")
    missing = sorted(set(TEMPLATES) - set(found))
    if missing:
        sys.exit(f"{sdist} lacks the templates of {missing}")
    return found


def train_tokenizer(templates, conversations, path):
    specials = set()
    for name, text in templates.items():
        specials.update(CONTROL.findall(text))
        _, bos, eos = TEMPLATES[name]
        specials.update(t for t in (bos, eos) if t)
    corpus = [json.dumps(c, ensure_ascii=False) for c in conversations.values()]
    corpus += list(templates.values())
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1200,
        special_tokens=sorted(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus * 3, trainer)
    tok.save(path)


def vllm_messages(messages):
    """What vLLM hands the template: tool-call arguments decoded from JSON strings."""
    out = copy.deepcopy(messages)
    for m in out:
        for call in m.get("tool_calls") or []:
            args = call["function"].get("arguments")
            if isinstance(args, str):
                try:
                    call["function"]["arguments"] = json.loads(args)
                except ValueError:
                    pass
    return out


def main(sdist, workdir, inputs_path, output_path):
    with open(inputs_path, encoding="utf-8") as f:
        conversations = json.load(f)
    templates = extract(sdist)
    os.makedirs(workdir, exist_ok=True)
    tokenizer_file = os.path.join(workdir, "tokenizer.json")
    train_tokenizer(templates, conversations, tokenizer_file)
    results = {}
    for name, text in templates.items():
        _, bos, eos = TEMPLATES[name]
        directory = os.path.join(workdir, name)
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "chat_template.jinja"), "w", encoding="utf-8") as f:
            f.write(text)
        with open(tokenizer_file, encoding="utf-8") as src, open(
            os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8"
        ) as dst:
            dst.write(src.read())
        config = {k: v for k, v in (("bos_token", bos), ("eos_token", eos)) if v}
        with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f)
        tok = PreTrainedTokenizerFast(tokenizer_file=tokenizer_file, **config)
        tok.chat_template = text
        per = results.setdefault(name, {})
        for conv_name, conv in conversations.items():
            args = dict(
                tools=conv.get("tools") or None,
                add_generation_prompt=conv["add_generation_prompt"],
                **conv.get("kwargs", {}),
            )
            messages = vllm_messages(conv["messages"])
            try:
                rendered = tok.apply_chat_template(messages, tokenize=False, **args)
            except Exception as e:  # the template refuses the conversation
                per[conv_name] = {"error": f"{type(e).__name__}: {e}"}
                continue
            ids = tok(rendered, add_special_tokens=False)["input_ids"]
            direct = tok.apply_chat_template(messages, tokenize=True, return_dict=True, **args)["input_ids"]
            if direct != ids:
                sys.exit(f"{name}/{conv_name}: tokenize=True differs from encoding the text without special tokens")
            per[conv_name] = {"text": rendered, "ids": ids}
    with open(output_path, "w", encoding="utf-8") as f:
        json.dump(results, f, ensure_ascii=False)


if __name__ == "__main__":
    main(*sys.argv[1:])
