"""The stand-in's deterministic chat template (DeepSeek style).

Rendered text, then tokenized with ``tokenizer.encode`` (no extra BOS: the template has it)::

    <｜begin▁of▁sentence｜>{system and developer contents joined by "\\n\\n"}
    [if tools] "\\n\\n## Tools\\n" + one compact, key-sorted JSON line per tool
    per user message:       <｜User｜>{content}
    per tool message:       <｜User｜>[tool result] {content}
    per assistant message:  <｜Assistant｜></think>{content}{tool calls as compact JSON}<｜end▁of▁sentence｜>
    [add_generation_prompt] <｜Assistant｜><think>      when thinking is on
                            <｜Assistant｜></think>     when thinking is off

Content is a string, null, or a list of ``{"type": "text", "text": ...}`` parts joined by
"\\n".  ``thinking`` comes from ``--default-chat-template-kwargs`` updated by the request's
``chat_template_kwargs``.  Both ``/v1/chat/completions`` and ``/tokenize`` with ``messages``
use ``render_ids``, so their prompt token counts are equal.
"""
import json

from . import tokenizer as tok

ROLES = ("system", "developer", "user", "assistant", "tool")


class TemplateError(ValueError):
    """The messages cannot be rendered (bad role or content)."""


def content_text(content, where="content"):
    """Plain text of a message content (string, null or list of text parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise TemplateError(f"{where}: only text content parts are supported by this model")
            texts.append(part["text"])
        return "\n".join(texts)
    raise TemplateError(f"{where}: content must be a string, null or a list of text parts")


def _compact(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def render(messages, tools=None, add_generation_prompt=True, thinking=False):
    """Render ``messages`` (already a list) to the prompt text."""
    if not isinstance(messages, list) or not messages:
        raise TemplateError("messages must be a non-empty list")
    system, turns = [], []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") not in ROLES:
            raise TemplateError(f"messages[{i}]: role must be one of {', '.join(ROLES)}")
        text = content_text(msg.get("content"), f"messages[{i}].content")
        role = msg["role"]
        if role in ("system", "developer"):
            system.append(text)
        elif role == "user":
            turns.append(tok.SPECIAL_TOKENS[tok.USER_ID] + text)
        elif role == "tool":
            turns.append(tok.SPECIAL_TOKENS[tok.USER_ID] + "[tool result] " + text)
        else:
            calls = msg.get("tool_calls") or []
            turns.append(
                tok.SPECIAL_TOKENS[tok.ASSISTANT_ID] + tok.SPECIAL_TOKENS[tok.THINK_END_ID] + text
                + (_compact(calls) if calls else "") + tok.SPECIAL_TOKENS[tok.EOS_ID]
            )
    head = tok.SPECIAL_TOKENS[tok.BOS_ID] + "\n\n".join(system)
    if tools:
        head += "\n\n## Tools\n" + "\n".join(_compact(t) for t in tools)
    text = head + "".join(turns)
    if add_generation_prompt:
        text += tok.SPECIAL_TOKENS[tok.ASSISTANT_ID]
        text += tok.SPECIAL_TOKENS[tok.THINK_START_ID if thinking else tok.THINK_END_ID]
    return text


def render_ids(messages, tools=None, add_generation_prompt=True, thinking=False):
    """Prompt token ids of a chat request."""
    return tok.encode(render(messages, tools, add_generation_prompt, thinking))


def last_user_text(messages):
    """Text of the last user message ('' if none)."""
    for msg in reversed(messages):
        if isinstance(msg, dict) and msg.get("role") == "user":
            return content_text(msg.get("content"))
    return ""
