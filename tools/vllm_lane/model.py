"""The lane's tiny model, made on this machine: ``python model.py OUTPUT_DIR`` in the lane's venv.

Nothing is downloaded. The tokenizer is a byte-level BPE trained with the ``tokenizers`` library
on sentences generated here from a fixed word list (seeded, so every run makes the same one); the
model is a 2-layer Llama with random weights (seeded) whose vocabulary is exactly the tokenizer's.

Files: ``config.json``, ``generation_config.json``, ``model.safetensors``, ``tokenizer.json`` and
``tokenizer_config.json`` with a Jinja chat template that

- honours ``thinking`` (``chat_template_kwargs``): the generation prompt ends in ``<think>`` when
  it is true and in ``</think>`` otherwise (the default);
- lists the request's tools, and renders an assistant's tool calls as
  ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` and a tool result as
  ``<tool_response>...</tool_response>``, each marker a special token of its own: the layout of
  vLLM's ``hermes`` tool parser, which the lane's server uses.

The lane caches the folder under a key made from this file's content (:func:`server.model_dir`),
so any change here makes a new model.
"""
import json
import random
import sys
from pathlib import Path

SEED = 20261203
VOCAB_SIZE = 4096
MAX_POSITIONS = 4096
SHAPE = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 32}
DTYPE = "bfloat16"

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
ROLES = ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>")
REASONING = ("<think>", "</think>")
TOOLS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
SPECIAL = (BOS, EOS, PAD, *ROLES, *REASONING, *TOOLS)

CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- if tools -%}"
    "<|system|>You may call these tools, each call as one tool_call block:"
    "{%- for tool in tools -%}{{ '\\n' }}{{ tool | tojson }}{%- endfor -%}"
    "<|end|>"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "<|assistant|>{{- message['content'] or '' -}}"
    "{%- for call in message['tool_calls'] or [] -%}"
    "{%- set arguments = call['function']['arguments'] -%}"
    "<tool_call>{\"name\": {{ call['function']['name'] | tojson }}, \"arguments\": "
    "{{ arguments if arguments is string else arguments | tojson }}}</tool_call>"
    "{%- endfor -%}"
    "<|end|>"
    "{%- elif message['role'] == 'tool' -%}"
    "<tool_response>{{- message['content'] -}}</tool_response>"
    "{%- else -%}"
    "<|{{ message['role'] }}|>{{- message['content'] -}}<|end|>"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "<|assistant|>{%- if thinking is defined and thinking -%}<think>{%- else -%}</think>{%- endif -%}"
    "{%- endif -%}"
)

WORDS = (
    "the a an of to and in on at by for with from over under after before between through about "
    "harbor ledger barge timber tide noon lamp pier hour river crossing dawn library reading room "
    "weather mountain pass city wall railway station orchard autumn market square lighthouse keeper "
    "day night morning evening quiet busy long short old new plain simple careful exact secret code "
    "record archive office shipping regional note entry line read write describe compute multiply "
    "number reply answer only question context sentence deterministic retrieval validation request "
    "tool call weather city paris london tokyo get current report summary verify verification model "
    "token prompt window server client test value result field name type list object string true false "
    "is was were are be been has have had will would can could should must may might not no yes "
    "one two three four five six seven eight nine ten hundred thousand first second third last"
).split()
PUNCTUATION = (".", ",", ":", ";", "?", "!", "-", "(", ")", "\"", "'", "{", "}", "[", "]", "=", "_", "/")


def training_text(rng: random.Random, lines: int = 20000) -> list[str]:
    """Sentences of the word list with numbers, punctuation, codes and JSON-like fragments."""
    out = []
    for _unused in range(lines):
        words = [rng.choice(WORDS) for _unused in range(rng.randint(4, 18))]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 99999)))
        if rng.random() < 0.2:
            words.insert(rng.randrange(len(words)), f"{rng.choice(WORDS).upper()}-{rng.randint(0, 9999)}")
        sentence = " ".join(words)
        sentence = sentence[0].upper() + sentence[1:] + rng.choice(PUNCTUATION[:5])
        if rng.random() < 0.1:
            sentence = json.dumps({"name": rng.choice(WORDS), "arguments": {rng.choice(WORDS): rng.choice(WORDS)}})
        out.append(sentence)
    return out


def build_tokenizer(rng: random.Random):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(SPECIAL), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(training_text(rng), trainer=trainer)
    bos = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B",
                                                             special_tokens=[(BOS, bos)])
    return tokenizer


def build_weights(vocab: int):
    import torch

    gen = torch.Generator().manual_seed(SEED)
    dtype = getattr(torch, DTYPE)
    hidden, inter = SHAPE["hidden_size"], SHAPE["intermediate_size"]
    q_out = SHAPE["num_attention_heads"] * SHAPE["head_dim"]
    kv_out = SHAPE["num_key_value_heads"] * SHAPE["head_dim"]

    def rand(*shape):
        return (torch.randn(*shape, generator=gen) * 0.02).to(dtype)

    tensors = {"model.embed_tokens.weight": rand(vocab, hidden), "model.norm.weight": torch.ones(hidden, dtype=dtype),
               "lm_head.weight": rand(vocab, hidden)}
    for i in range(SHAPE["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors.update({
            p + "self_attn.q_proj.weight": rand(q_out, hidden), p + "self_attn.k_proj.weight": rand(kv_out, hidden),
            p + "self_attn.v_proj.weight": rand(kv_out, hidden), p + "self_attn.o_proj.weight": rand(hidden, q_out),
            p + "mlp.gate_proj.weight": rand(inter, hidden), p + "mlp.up_proj.weight": rand(inter, hidden),
            p + "mlp.down_proj.weight": rand(hidden, inter),
            p + "input_layernorm.weight": torch.ones(hidden, dtype=dtype),
            p + "post_attention_layernorm.weight": torch.ones(hidden, dtype=dtype)})
    return tensors


def make(out: Path) -> dict:
    from safetensors.torch import save_file

    rng = random.Random(SEED)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(rng)
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    tokenizer.save(str(out / "tokenizer.json"))
    ids = {name: tokenizer.token_to_id(name) for name in (BOS, EOS, PAD)}
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS, "pad_token": PAD,
        "model_max_length": MAX_POSITIONS, "clean_up_tokenization_spaces": False,
        "additional_special_tokens": [t for t in SPECIAL if t not in (BOS, EOS, PAD)],
        "chat_template": CHAT_TEMPLATE}, indent=1) + "\n")
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
              "max_position_embeddings": MAX_POSITIONS, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
              "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": DTYPE,
              "bos_token_id": ids[BOS], "eos_token_id": ids[EOS], "pad_token_id": ids[PAD], **SHAPE}
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": ids[BOS], "eos_token_id": ids[EOS], "pad_token_id": ids[PAD]}, indent=1) + "\n")
    tensors = build_weights(vocab)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    params = sum(t.numel() for t in tensors.values())
    shape = {"architecture": "LlamaForCausalLM", "vocab_size": vocab, "parameters": params, "dtype": DTYPE,
             "max_position_embeddings": MAX_POSITIONS, **SHAPE}
    (out / "lane-model.json").write_text(json.dumps(shape, indent=1) + "\n")
    return shape


if __name__ == "__main__":
    print(json.dumps(make(Path(sys.argv[1]))))
