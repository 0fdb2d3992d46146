"""OpenAI-compatible request handling: validation, generation and the vLLM response shapes.

Handlers return ``Json`` or ``Sse`` results or raise ``ApiError`` (the >= 0.10.1 envelope
``{"error": {"message", "type", "param", "code"}}``).  Unknown request fields are ignored, as
vLLM does.  Only one choice per request (``n`` = 1); ``logprobs``, ``echo`` and ``best_of`` > 1
are refused with 400.  Completions prompts get a BOS token unless ``add_special_tokens`` is
false; chat prompts are rendered with template.py (the template carries its own BOS).

As a real vLLM server was seen to answer (vllm-contract.md, last section): a field of the wrong
type is a 400 of type ``Bad Request`` with ``param`` ``body.<field>`` and a message ending in
`` (parameter=<field>, value=<value>)``; an unknown model is a 404 naming the valid aliases;
``max_tokens`` above the window is a 400, so is a prompt that fills the window (``param``
``input_tokens``); a prompt that fits with a ``max_tokens`` that does not is capped to the room
left, or refused with 400 under ``DSPARK_SIM_OVERLONG=reject``.  A chat message carries
``tool_calls`` only when there are calls; a named ``tool_choice`` finishes with ``stop``.  Streams:
a chat stream opens with a role-only chunk, and each chunk carries the tokens of one decode step
(with speculative decoding, the accepted drafts and the bonus token arrive together).
"""
import json
import threading
import time
import uuid

from . import VERSION, template
from . import tokenizer as tok
from .engine import DEAD_MESSAGE, EngineDead
from .model import ChatContext, Sampling

ERROR_TYPES = {400: "BadRequestError", 401: "Unauthorized", 404: "NotFoundError", 500: "InternalServerError"}
_KINDS = {"int": (int,), "number": (int, float), "bool": (bool,), "str": (str,), "dict": (dict,),
          "list": (list,)}
_KIND_NAMES = {"int": "integer", "number": "number", "bool": "boolean", "str": "string", "dict": "object",
               "list": "array"}


class ApiError(Exception):
    def __init__(self, status, message, param=None, err_type=None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param
        self.err_type = err_type or ERROR_TYPES.get(status, "BadRequestError")

    def body(self):
        return {"error": {"message": self.message, "type": self.err_type, "param": self.param, "code": self.status}}


class Json:
    def __init__(self, obj, status=200):
        self.obj, self.status = obj, status


class Sse:
    """A stream of ``data: ...`` events; ``events`` is a generator (closed on disconnect)."""

    def __init__(self, events):
        self.events = events


def invalid(name, value, text):
    """A request-validation error as vLLM reports pydantic's: type ``Bad Request``, ``body.<field>``."""
    shown = str(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return ApiError(400, f"1 validation error: {name}: {text} (parameter={name}, value={shown})", f"body.{name}",
                    "Bad Request")


def _field(body, name, kind, default=None):
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, _KINDS[kind]) or (kind in ("int", "number") and isinstance(value, bool)):
        raise invalid(name, value, f"Input should be a valid {_KIND_NAMES[kind]}")
    return value


def _sse(obj):
    return "data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n\n"


DONE = "data: [DONE]\n\n"
# What the HTTP server knows of the request this thread answers: ``client_gone() -> bool`` (server.py sets it),
# so that a non-streamed generation stops when its client has gone.
REQUEST = threading.local()


class Api:
    def __init__(self, engine):
        self.engine = engine
        self.cfg = engine.cfg

    # ---- helpers ---------------------------------------------------------------------------
    def _check_model(self, body):
        name = body.get("model")
        if name is None:
            return
        if not isinstance(name, str) or name not in self.cfg.served_names:
            raise ApiError(404, f"The model `{name}` does not exist. Valid aliases: "
                                f"{', '.join(self.cfg.served_names)}.", "model")

    def _usage(self, prompt_tokens, completion_tokens):
        wrong = self.engine.settings.has("wrong_usage")
        return {"prompt_tokens": prompt_tokens + (1 if wrong else 0),
                "total_tokens": prompt_tokens + completion_tokens,
                "completion_tokens": completion_tokens, "prompt_tokens_details": None}

    def _sampling(self, body, prompt_len, max_fields):
        if _field(body, "n", "int", 1) != 1:
            raise ApiError(400, "n must be 1: the DSpark stand-in serves one choice per request", "n")
        if _field(body, "best_of", "int", 1) != 1:
            raise ApiError(400, "best_of is not supported by the DSpark stand-in", "best_of")
        if body.get("logprobs") not in (None, False) or body.get("top_logprobs") is not None:
            raise ApiError(400, "logprobs are not supported by the DSpark stand-in", "logprobs")
        if body.get("echo") or body.get("prompt_logprobs") is not None:
            raise ApiError(400, "echo and prompt_logprobs are not supported by the DSpark stand-in", "echo")
        max_tokens, field = None, max_fields[-1]
        for field in max_fields:
            max_tokens = _field(body, field, "int")
            if max_tokens is not None:
                break
        if max_tokens is not None and max_tokens < 1:
            raise ApiError(400, f"{field} must be at least 1, got {max_tokens}.", field)
        max_tokens = self._fit(prompt_len, max_tokens, field)
        temperature = _field(body, "temperature", "number", 1.0)
        if temperature < 0:
            raise ApiError(400, f"temperature must be non-negative, got {temperature}.", "temperature")
        top_p = _field(body, "top_p", "number", 1.0)
        if not 0 < top_p <= 1:
            raise ApiError(400, f"top_p must be in (0, 1], got {top_p}.", "top_p")
        top_k = _field(body, "top_k", "int", -1)
        if top_k < -1:
            raise ApiError(400, f"top_k must be -1 (disable), 0 or at least 1, got {top_k}.", "top_k")
        stop = body.get("stop")
        stop = [stop] if isinstance(stop, str) else stop
        if stop is not None and (not isinstance(stop, list) or not all(isinstance(s, str) for s in stop)):
            raise invalid("stop", stop, "Input should be a string or a list of strings")
        return Sampling(max_tokens=max_tokens, temperature=float(temperature), top_p=float(top_p), top_k=top_k,
                        seed=_field(body, "seed", "int"), ignore_eos=_field(body, "ignore_eos", "bool", False),
                        stop=tuple(stop or ()), skip_special_tokens=_field(body, "skip_special_tokens", "bool", True))

    def _fit(self, prompt_len, max_tokens, field):
        """``max_tokens`` within the window: the room left when absent; above the window, or a prompt
        that fills it, is a 400; an over-long sum is capped (or a 400 with DSPARK_SIM_OVERLONG=reject)."""
        m = self.cfg.max_model_len
        if max_tokens is not None and max_tokens > m:
            raise ApiError(400, f"{field}={max_tokens} cannot be greater than max_model_len={m}. Please request "
                                f"fewer output tokens. (parameter={field}, value={max_tokens})", field)
        if prompt_len >= m:
            raise ApiError(400, f"This model's maximum context length is {m} tokens. However, your prompt contains "
                                f"at least {m + 1 if prompt_len > m else prompt_len} input tokens, which exceeds this "
                                "limit even without any output tokens. Please reduce the length of the input prompt. "
                                f"(parameter=input_tokens, value={prompt_len})", "input_tokens")
        room = m - prompt_len
        if max_tokens is None or (max_tokens > room and self.engine.settings.overlong == "cap"):
            return room
        if max_tokens > room:
            raise ApiError(400, f"This model's maximum context length is {m} tokens. However, you requested "
                                f"{max_tokens} output tokens and your prompt contains {prompt_len} input tokens, "
                                f"for a total of {prompt_len + max_tokens} tokens. Please reduce the length of "
                                "the input prompt or the number of requested output tokens.")
        return max_tokens

    def _stream_flags(self, body):
        stream = _field(body, "stream", "bool", False)
        options = _field(body, "stream_options", "dict")
        if options is not None and not stream:
            raise ApiError(400, "Stream options can only be defined when `stream=True`.", "stream_options")
        options = options or {}
        include_usage = bool(options.get("include_usage"))
        return stream, include_usage, include_usage and bool(options.get("continuous_usage_stats"))

    def _generate(self, prompt_ids, prompt_text, sampling, chat=None):
        try:
            return self.engine.generate(prompt_ids, prompt_text, sampling, chat)
        except EngineDead:
            raise ApiError(500, DEAD_MESSAGE) from None

    def _consume(self, generation):
        generation.client_gone = getattr(REQUEST, "client_gone", None)
        try:
            return list(generation)
        except EngineDead:
            raise ApiError(500, DEAD_MESSAGE) from None

    def _stream(self, generation, prompt_len, head, make_choice, include_usage, continuous, opening=None):
        """SSE events: ``opening`` (a choice sent as the first output arrives, e.g. the chat role chunk),
        then one chunk per engine step (``make_choice(tokens, last)`` -> choice or None), usage, [DONE]."""
        tokens = iter(generation)
        steps = list(generation.output.spec.steps) or [len(generation.output.tokens)]
        count, total, group = 0, len(generation.output.tokens), []
        try:
            for token in tokens:
                count += 1
                group.append(token)
                if count < total and len(group) < steps[0]:
                    continue
                steps = steps[1:] or [1]
                if opening is not None:
                    yield self._chunk(head, opening, continuous, prompt_len, 0)
                    opening = None
                choice = make_choice(group, count == total)
                group = []
                if choice is not None:
                    yield self._chunk(head, choice, continuous, prompt_len, count)
        except EngineDead:
            yield _sse(ApiError(500, DEAD_MESSAGE).body())
            yield DONE
            return
        finally:
            tokens.close()
        if include_usage:
            yield _sse(dict(head, choices=[], usage=self._usage(prompt_len, count)))
        yield DONE

    def _chunk(self, head, choice, continuous, prompt_len, count):
        chunk = dict(head, choices=[choice])
        if continuous:
            chunk["usage"] = self._usage(prompt_len, count)
        return _sse(chunk)

    # ---- endpoints -------------------------------------------------------------------------
    def version(self, _body=None):
        return Json({"version": VERSION})

    def models(self, _body=None):
        created = int(self.engine.started)
        cards = [{
            "id": name, "object": "model", "created": created, "owned_by": "vllm", "root": self.cfg.model,
            "parent": None, "max_model_len": self.cfg.max_model_len,
            "permission": [{"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission", "created": created,
                            "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                            "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
                            "organization": "*", "group": None, "is_blocking": False}],
        } for name in self.cfg.served_names]
        return Json({"object": "list", "data": cards})

    def _completion_prompt(self, body):
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if prompt in ("", []):  # as vLLM: refused before tokenization, so not completed from BOS alone
            raise ApiError(400, "Either prompt or prompt_embeds must be provided and non-empty. "
                                f"(parameter=prompt, value={prompt!r})", "prompt")
        if isinstance(prompt, str):
            ids = tok.encode(prompt, add_bos=_field(body, "add_special_tokens", "bool", True))
            text = prompt
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            try:
                tok.check_ids(prompt)
            except ValueError as exc:
                raise ApiError(400, str(exc), "prompt") from None
            ids, text = prompt, tok.decode(prompt)
        elif isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, (str, list)) for p in prompt):
            raise ApiError(400, "batched prompts are not supported by the DSpark stand-in", "prompt")
        else:
            raise invalid("prompt", prompt, "Input should be a string or a list of token ids")
        if not ids:
            raise ApiError(400, "The prompt cannot be empty.", "prompt")
        return ids, text

    def completions(self, body):
        self._check_model(body)
        ids, text = self._completion_prompt(body)
        stream, include_usage, continuous = self._stream_flags(body)
        sampling = self._sampling(body, len(ids), ("max_tokens",))
        generation = self._generate(ids, text, sampling)
        head = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": self.cfg.served_name}
        out = generation.output
        if stream:
            def choice(group, last):
                return {"index": 0, "text": "".join(t.text for t in group if t.channel == "content"),
                        "logprobs": None, "finish_reason": out.finish_reason if last else None,
                        "stop_reason": out.stop_reason if last else None}
            return Sse(self._stream(generation, len(ids), head, choice, include_usage, continuous))
        tokens = self._consume(generation)
        return Json(dict(head, choices=[{
            "index": 0, "text": "".join(t.text for t in tokens if t.channel == "content"), "logprobs": None,
            "finish_reason": out.finish_reason, "stop_reason": out.stop_reason, "token_ids": None,
            "prompt_logprobs": None, "prompt_token_ids": None}],
            service_tier=None, system_fingerprint=None, usage=self._usage(len(ids), len(tokens)),
            kv_transfer_params=None))

    def _chat_prompt(self, body):
        """(prompt ids, tools, thinking) of a body with ``messages`` (chat or /tokenize)."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise invalid("messages", messages, "Input should be a non-empty list")
        tools = _field(body, "tools", "list")
        for i, tool in enumerate(tools or []):
            function = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
                raise ApiError(400, f"tools[{i}]: a function tool needs function.name", "tools")
        kwargs = dict(self.cfg.default_chat_template_kwargs)
        kwargs.update(_field(body, "chat_template_kwargs", "dict", {}))
        thinking = bool(kwargs.get("thinking", kwargs.get("enable_thinking", False)))
        try:
            ids = template.render_ids(messages, tools, _field(body, "add_generation_prompt", "bool", True), thinking)
        except template.TemplateError as exc:
            raise ApiError(400, str(exc), "messages") from None
        return ids, tools or [], thinking

    def _tool_choice(self, body, tools):
        choice = body.get("tool_choice")
        auto_enabled = self.cfg.enable_auto_tool_choice and self.cfg.tool_call_parser
        if choice is None:
            return "auto" if tools and auto_enabled else "none"
        if choice == "none":
            return "none"
        if choice in ("auto", "required") and not tools:
            raise ApiError(400, f'tool_choice "{choice}" requires `tools`', "tool_choice")
        if choice == "auto":
            if not auto_enabled:
                raise ApiError(400, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser '
                                    "to be set", "tool_choice")
            return "auto"
        if choice == "required":
            return "required"
        name = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
        if not isinstance(name, str):
            raise ApiError(400, "tool_choice must be none, auto, required or a named function", "tool_choice")
        if name not in [t["function"]["name"] for t in tools]:
            raise ApiError(400, f"Tool '{name}' has not been passed in `tools`.", "tool_choice")
        return name

    def chat(self, body):
        self._check_model(body)
        ids, tools, thinking = self._chat_prompt(body)
        choice_mode = self._tool_choice(body, tools)
        stream, include_usage, continuous = self._stream_flags(body)
        sampling = self._sampling(body, len(ids), ("max_completion_tokens", "max_tokens"))
        ctx = ChatContext(template.last_user_text(body["messages"]), tools, choice_mode, thinking,
                          bool(self.cfg.reasoning_parser))
        generation = self._generate(ids, tok.decode(ids), sampling, ctx)
        out = generation.output
        head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": self.cfg.served_name}
        calls = []
        if out.tool_call:
            calls = [{"id": f"chatcmpl-tool-{uuid.uuid4().hex}", "type": "function",
                      "function": {"name": out.tool_call["name"], "arguments": out.tool_call["arguments"]}}]
        if stream:
            def choice(group, last):
                delta = {}
                for channel in ("reasoning", "content"):
                    if any(t.channel == channel for t in group):
                        delta[channel] = "".join(t.text for t in group if t.channel == channel)
                if last and calls:
                    delta = {"reasoning": delta["reasoning"]} if "reasoning" in delta else {}
                    delta["tool_calls"] = [dict(calls[0], index=0)]
                elif last and not delta:
                    delta = {"content": ""}
                elif not delta:
                    return None
                return {"index": 0, "delta": delta, "logprobs": None,
                        "finish_reason": out.finish_reason if last else None,
                        **({"stop_reason": out.stop_reason} if last else {})}
            opening = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                       "finish_reason": None}
            head["object"] = "chat.completion.chunk"
            return Sse(self._stream(generation, len(ids), head, choice, include_usage, continuous, opening))
        tokens = self._consume(generation)
        message = {"role": "assistant", "content": out.content, "refusal": None, "annotations": None, "audio": None,
                   "function_call": None, **({"tool_calls": calls} if calls else {}), "reasoning": out.reasoning}
        return Json(dict(head, choices=[{"index": 0, "message": message, "logprobs": None,
                                         "finish_reason": out.finish_reason, "stop_reason": out.stop_reason,
                                         "token_ids": None}],
                         service_tier=None, system_fingerprint=None, usage=self._usage(len(ids), len(tokens)),
                         prompt_logprobs=None, prompt_token_ids=None, kv_transfer_params=None))

    def tokenize(self, body):
        self._check_model(body)
        if "messages" in body:
            ids = self._chat_prompt(body)[0]
        elif isinstance(body.get("prompt"), str):
            ids = tok.encode(body["prompt"], add_bos=_field(body, "add_special_tokens", "bool", True))
        else:
            raise ApiError(400, "1 validation error: either `prompt` (a string) or `messages` is required", "prompt")
        strs = [tok.token_text(t, False) for t in ids] if _field(body, "return_token_strs", "bool", False) else None
        return Json({"count": len(ids), "max_model_len": self.cfg.max_model_len, "tokens": ids, "token_strs": strs})

    def detokenize(self, body):
        self._check_model(body)
        ids = body.get("tokens")
        try:
            tok.check_ids(ids)
        except ValueError as exc:
            raise ApiError(400, str(exc), "tokens") from None
        return Json({"prompt": tok.decode(ids)})
