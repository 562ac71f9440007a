#!/usr/bin/env python3
"""A small random-initialised Qwen3 around a real tokenizer, saved as a Hugging Face model dir.

Why: the GPU benchmarks need a model the engines load as a real architecture (Qwen3: dense,
GQA, served by SGLang and vLLM with their fast paths) without downloading gigabytes to an
offline machine. Weights are random (seeded), so the text is noise; throughput, token ids,
the chat template and the parsers are what is measured. Default size: 8 layers, hidden 1024,
about 176M parameters in bf16 with SmolLM2's 49k vocabulary.

`--template qwen3-thinking` replaces the tokenizer's chat template with a Qwen3-style one
(`<think>` blocks, `enable_thinking`, tools in the system prompt, `<tool_call>` /
`<tool_response>`), and adds those tags as tokens, so the engines' qwen3 reasoning parser and
qwen25/hermes tool parser apply to it as to a real Qwen3.

Usage (on the GPU machine, with the staged stack on PYTHONPATH):
  python3 bench/gpu/make_model.py --tokenizer .stage/misc/tok --out /tmp/model [--template qwen3-thinking]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

# Qwen3's template, trimmed to what fleetgen sends (system, user, assistant with reasoning and
# tool calls, tool results), on the ChatML markers SmolLM2's tokenizer already has.
QWEN3_THINKING_TEMPLATE = r"""{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}
{{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" }}
{{- "You are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
{%- for tool in tools %}{{- "\n" }}{{- tool | tojson }}{%- endfor %}
{{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within " }}
{{- "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": " }}
{{- "<args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- set content = message.content if message.content is string else '' %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
{{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' }}
{%- elif message.role == 'assistant' %}
{%- set reasoning = message.reasoning_content if message.reasoning_content is string else '' %}
{%- if not reasoning and '</think>' in content %}
{%- set reasoning = content.split('</think>')[0].split('<think>')[-1].strip('\n') %}
{%- set content = content.split('</think>')[-1].lstrip('\n') %}
{%- endif %}
{{- '<|im_start|>assistant\n' }}
{%- if loop.last or reasoning %}{{- '<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' }}{%- endif %}
{{- content }}
{%- if message.tool_calls %}
{%- for tc in message.tool_calls %}
{%- set f = tc.function if tc.function else tc %}
{%- if (loop.first and content) or not loop.first %}{{- '\n' }}{%- endif %}
{{- '<tool_call>\n{"name": "' + f.name + '", "arguments": ' }}
{%- if f.arguments is string %}{{- f.arguments }}{%- else %}{{- f.arguments | tojson }}{%- endif %}
{{- '}\n</tool_call>' }}
{%- endfor %}
{%- endif %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\n<tool_response>\n' + content + '\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}
{%- endif %}
"""
THINKING_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokenizer", required=True, help="dir with tokenizer.json etc. (SmolLM2's: .stage/misc/tok)")
    p.add_argument("--out", required=True, help="model dir to write")
    p.add_argument(
        "--template",
        choices=["tokenizer", "qwen3-thinking"],
        default="tokenizer",
        help="chat template: the tokenizer's own, or Qwen3-style with thinking and tool calls",
    )
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument(
        "--head-dim", type=int, default=128, help="Qwen3 keeps 128 whatever the width (so q is wider than hidden)"
    )
    p.add_argument("--intermediate", type=int, default=3072)
    p.add_argument("--max-position", type=int, default=8192)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", help="where to initialise: auto (cuda when present), cuda, cpu")
    a = p.parse_args(argv)

    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    tok_dir, out = Path(a.tokenizer), Path(a.out)
    if not (tok_dir / "tokenizer.json").is_file() and not (tok_dir / "tokenizer_config.json").is_file():
        sys.exit(f"make_model: --tokenizer {tok_dir}: no tokenizer.json / tokenizer_config.json there")
    if a.heads % a.kv_heads:
        sys.exit(f"make_model: --heads {a.heads} must divide by --kv-heads {a.kv_heads}")
    tok = AutoTokenizer.from_pretrained(tok_dir)
    if a.template == "qwen3-thinking":
        tok.add_tokens([t for t in THINKING_TOKENS if t not in tok.get_vocab()])
        tok.chat_template = QWEN3_THINKING_TEMPLATE
    elif not tok.chat_template and (tok_dir / "chat_template.jinja").is_file():
        tok.chat_template = (tok_dir / "chat_template.jinja").read_text()
    eos = tok.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tok.get_vocab() else tok.eos_token_id
    cfg = Qwen3Config(
        vocab_size=(len(tok) + 127) // 128 * 128,
        hidden_size=a.hidden,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        head_dim=a.head_dim,
        intermediate_size=a.intermediate,
        max_position_embeddings=a.max_position,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=eos,
        pad_token_id=tok.pad_token_id,
    )
    cfg.torch_dtype = torch.bfloat16
    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    torch.manual_seed(a.seed)
    with torch.device(device):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    # SmolLM2's tokenizer says 1e30: SGLang's /v1/tokenize then fails validating max_model_len (HTTP 500).
    tok.model_max_length = a.max_position
    model.save_pretrained(out)
    tok.save_pretrained(out)
    if a.template == "qwen3-thinking" or not (out / "chat_template.jinja").exists():
        (out / "chat_template.jinja").write_text(tok.chat_template)
    if (tok_dir / "generation_config.json").is_file() and a.template == "tokenizer":
        shutil.copy(tok_dir / "generation_config.json", out / "generation_config.json")
    else:
        # Qwen3's own generation_config.json sets top_k 20: SGLang's chat endpoint applies it where a request is silent.
        extra = {"top_k": 20, "do_sample": True} if a.template == "qwen3-thinking" else {}
        GenerationConfig(
            bos_token_id=tok.bos_token_id, eos_token_id=eos, pad_token_id=tok.pad_token_id, **extra
        ).save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    print(
        json.dumps(
            {
                "out": str(out),
                "params_m": round(n / 1e6, 1),
                "vocab": cfg.vocab_size,
                "layers": a.layers,
                "hidden": a.hidden,
                "template": a.template,
                "device": device,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
