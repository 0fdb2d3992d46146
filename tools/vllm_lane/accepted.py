"""Every accepted difference between the engine stand-in and the real vLLM server, with its reason.

This table is the only place a difference may be accepted. ``tests/vllm/test_contract.py`` sends
the same requests to both servers (:mod:`.contract`) and fails on any difference that no entry
here matches, and on any entry that matched nothing (an entry the stand-in no longer needs must go).

An entry matches a :class:`~.contract.Difference` when its ``probes``, ``kind`` and one of its
``paths`` match; in these patterns ``*`` stands for any run of characters and nothing else is
special. ``unread`` names words that must not appear in the collection's code (``plugins/`` and
``roles/``, as whole words: ``n_routed_experts`` is not ``routed_experts``): the test checks them,
so a reason that says "the collection reads none of them" stays true.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from tools.vllm_lane.contract import Difference


@dataclass(frozen=True)
class Accepted:
    probes: str
    kind: str
    paths: tuple[str, ...]
    reason: str
    unread: tuple[str, ...] = ()

    def matches(self, diff: Difference) -> bool:
        return (_glob(self.probes, diff.probe) and _glob(self.kind, diff.kind)
                and any(_glob(p, diff.path) for p in self.paths))


def _glob(pattern: str, text: str) -> bool:
    return re.fullmatch(".*".join(re.escape(part) for part in pattern.split("*")), text) is not None


ACCEPTED: tuple[Accepted, ...] = (
    Accepted("*", "only_real",
             ("choices[].routed_experts", "ec_transfer_params", "metrics", "prompt_text",
              "usage.completion_tokens_details", "chunk.choices[].token_ids", "chunk.choices[].prompt_token_ids",
              "chunk.prompt_text", "chunk.prompt_token_ids"),
             "fields vLLM 0.32 adds to its answers, all null here; the image's vLLM 0.26 need not send them "
             "and the collection reads none of them",
             unread=("routed_experts", "ec_transfer_params", "prompt_text", "completion_tokens_details",
                     "prompt_token_ids")),
    Accepted("*", "type", ("system_fingerprint",),
             "vLLM 0.32 fingerprints every answer (vllm-0.32.0-<hash>) where the stand-in, like the contract "
             "recorded for the image's version, sends null (version-sensitive); the collection does not read it",
             unread=("system_fingerprint",)),
    Accepted("*", "only_real", ("usage_chunk.system_fingerprint", "chunk.system_fingerprint"),
             "the same fingerprint, also on stream chunks of vLLM 0.32; the stand-in leaves it out there",
             unread=("system_fingerprint",)),
    Accepted("*_stream", "only_standin", ("usage_chunk.usage.prompt_tokens_details",),
             "the real server drops a null prompt_tokens_details from the streamed usage chunk (it serialises "
             "chunks without nulls); the stand-in sends it as null; the collection does not read it",
             unread=("prompt_tokens_details",)),
    Accepted("chat_tools_*", "*",
             ("choices[].message.content", "choices[].message.tool_calls*", "chunk.choices[].delta.content",
              "chunk.choices[].delta.tool_calls*"),
             "the lane's model has random weights and never writes a complete <tool_call> block, so the real "
             "server answers with text (or nothing) and no tool_calls, while the stand-in's scripted model "
             "always calls the tool; the shape of a real tool call is therefore not compared here"),
    Accepted("metrics", "only_real",
             ("vllm:admission_rejections", "vllm:engine_sleep_state", "vllm:estimated_*_per_gpu",
              "vllm:external_prefix_cache_*", "vllm:inter_token_latency_seconds", "vllm:iteration_tokens",
              "vllm:mm_cache_*", "vllm:num_requests_waiting_by_reason", "vllm:prompt_tokens_by_source",
              "vllm:prompt_tokens_cached", "vllm:prompt_tokens_cached_by_source", "vllm:request_*",
              "vllm:tool_call_parser_invocations"),
             "metric families of vLLM 0.32 that the stand-in does not simulate (per-request histograms, "
             "cache-source split, multimodal and sleep-mode state, cost estimates); the collection reads none "
             "of them",
             unread=("admission_rejections", "engine_sleep_state", "estimated_flops_per_gpu",
                     "estimated_read_bytes_per_gpu", "estimated_write_bytes_per_gpu", "external_prefix_cache",
                     "inter_token_latency", "iteration_tokens", "mm_cache", "num_requests_waiting_by_reason",
                     "prompt_tokens_by_source", "prompt_tokens_cached", "vllm:request_", "tool_call_parser_invocations")),
    Accepted("metrics", "label", ("vllm:cache_config_info:*",),
             "vLLM 0.32 exports its whole cache configuration as labels of vllm:cache_config_info; the stand-in "
             "exports the ones a GB10 pair's profile sets; the collection reads only kv_cache_size_tokens, "
             "which both carry (checked by test_kv_size_label_on_both)"),
)


def accepted_for(diff: Difference) -> Accepted | None:
    return next((entry for entry in ACCEPTED if entry.matches(diff)), None)


def split(diffs: list[Difference]) -> tuple[list[tuple[Difference, Accepted]], list[Difference]]:
    """(accepted differences with their entry, differences no entry accepts)."""
    accepted, unlisted = [], []
    for diff in diffs:
        entry = accepted_for(diff)
        if entry is None:
            unlisted.append(diff)
        else:
            accepted.append((diff, entry))
    return accepted, unlisted


def unused(diffs: list[Difference]) -> list[Accepted]:
    """Entries that accept none of ``diffs``."""
    return [entry for entry in ACCEPTED if not any(entry.matches(d) for d in diffs)]
