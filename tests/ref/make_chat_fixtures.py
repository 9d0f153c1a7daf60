#!/usr/bin/env python3
"""Reference renderings for core/tokenizer/chat.c, made with transformers' apply_chat_template.

qwen2.5-math uses the chat_template of the Qwen2.5-Math tokenizer_config.json in
../shared/data/tokenizer/qwen2.5/. qwen2.5, qwen2 and llama3 use the non-tool
branches of the public Qwen2.5-Instruct, Qwen2-Instruct and Llama-3.2-Instruct
templates, transcribed below.
Writes tests/fixtures/tokenizer/chat.jsonl:
  {"template", "messages", "add_generation_prompt", "text", "ids"}
where ids are the Hugging Face `tokenizers` ids of text (special tokens allowed).

Run: python3 tests/ref/make_chat_fixtures.py  (needs transformers, tokenizers)
"""
import json
import os
import sys

from transformers import AutoTokenizer

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("SKPO_SHARED", os.path.join(TOP, "..", "shared"))
TOKDIR = os.path.join(SHARED, "data", "tokenizer", "qwen2.5")

QWEN25_INSTRUCT = (
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "{%- else %}\n"
    "    {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or (message.role == \"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)

QWEN2_INSTRUCT = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

LLAMA32_INSTRUCT = (
    "{{- bos_token }}\n"
    "{%- if not date_string is defined %}\n"
    "    {%- set date_string = \"26 Jul 2024\" %}\n"
    "{%- endif %}\n"
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- set system_message = messages[0]['content']|trim %}\n"
    "    {%- set messages = messages[1:] %}\n"
    "{%- else %}\n"
    "    {%- set system_message = \"\" %}\n"
    "{%- endif %}\n"
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n"
    "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n"
    "{{- system_message }}\n"
    "{{- \"<|eot_id|>\" }}\n"
    "{%- for message in messages %}\n"
    "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
    "{%- endif %}\n"
)

PROBLEM = "Find $x$ if $2x+3=7$.  \u00bfQu\u00e9? \u4e2d\u6587 \U0001F917"
DAPO = ("Solve the following math problem step by step. The last line of your response should be of the form "
        "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n" + PROBLEM +
        "\n\nRemember to put your answer on its own line after \"Answer:\".")

CONVERSATIONS = [
    [{"role": "user", "content": PROBLEM}],
    [{"role": "user", "content": DAPO}],
    [{"role": "system", "content": "  Be brief.\n"}, {"role": "user", "content": "\n 1+1?\t"}],
    [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3?"}],
    [{"role": "user", "content": "a"}, {"role": "system", "content": "late system"}, {"role": "user", "content": "b"}],
    [{"role": "user", "content": ""}],
    [{"role": "user", "content": "\u3000wide space\u00a0"}],
]


def main():
    tok = AutoTokenizer.from_pretrained(TOKDIR)
    templates = {"qwen2.5": QWEN25_INSTRUCT, "qwen2": QWEN2_INSTRUCT, "qwen2.5-math": tok.chat_template,
                 "llama3": LLAMA32_INSTRUCT}
    out_path = os.path.join(TOP, "tests", "fixtures", "tokenizer", "chat.jsonl")
    n = 0
    with open(out_path, "w") as out:
        for name, tmpl in templates.items():
            for msgs in CONVERSATIONS:
                for gen in (True, False):
                    kw = {"bos_token": "<|begin_of_text|>"} if name == "llama3" else {}
                    text = tok.apply_chat_template(msgs, chat_template=tmpl, tokenize=False,
                                                   add_generation_prompt=gen, **kw)
                    ids = tok.backend_tokenizer.encode(text, add_special_tokens=False).ids
                    rec = {"template": name, "messages": msgs, "add_generation_prompt": gen, "text": text}
                    if name != "llama3":  # the Qwen vocab has no Llama header tokens
                        rec["ids"] = ids
                    out.write(json.dumps(rec, ensure_ascii=False) + "\n")
                    n += 1
    print(f"wrote {n} renderings to {out_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
