# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The systems report's rows: the lanes' names, a row's shape and status, who measured it (``client_kind``, never
two kinds in one report), the counts and the Markdown page.

Split from :mod:`._systems` (the suite), which fills the rows."""
from __future__ import annotations

from ansible_collections.gb10.dspark.plugins.module_utils.serving._systems_measure import _ms, _r


LANES = ("canary", "latency", "concurrency", "throughput", "spec_decode", "external")
HTTP_LANES = ("canary", "latency", "concurrency", "throughput", "spec_decode")
STATUSES = ("PASS", "FAIL", "ERROR", "NOT_IMPLEMENTED")
RANK = "head"  # the rank every row is measured from


# Who measured a row. The suite's own lanes are OpenAI-compatible API clients; vllm-bench rows come
# from vLLM's own benchmark tool; the two are never reported together.
OWN_CLIENT_KIND = "openai_portable"
CLIENT_KINDS = ("openai_portable", "vllm-bench")
_KIND_SPELLINGS = {"openai_portable": "openai_portable", "openai-portable": "openai_portable",
                   "vllm-bench": "vllm-bench", "vllm_bench": "vllm-bench"}


# Keys of a row's ``client`` and ``server`` sections that describe the setup, not a measurement;
# everything else is a figure and is null in an ERROR row.
_SETUP_KEYS = frozenset({"tok_s_kind", "max_tokens", "max_model_len", "requests", "reps", "dropped_reps",
                         "concurrency", "prompt_tokens_constructed", "expected", "error", "report", "argv", "backend",
                         "quality_pillar"})


def new_row(lane: str, level: object = None) -> dict:
    """A row; the suite's own lanes are measured by its OpenAI-API client (``openai_portable``), an
    external row's kind is set from its client's report."""
    return {"lane": lane, "level": level, "status": "PASS", "reasons": [], "client": {}, "server": {},
            "samples": [], "client_kind": OWN_CLIENT_KIND if lane in HTTP_LANES else None}


def _null(section: dict) -> dict:
    return {k: (v if k in _SETUP_KEYS else None) for k, v in section.items()}


def finish_row(row: dict) -> dict:
    """An ERROR row keeps its reasons and setup but no figure: client, server and samples nulled."""
    if row["status"] == "ERROR":
        row["client"] = _null(row["client"])
        row["server"] = _null(row["server"])
        row["samples"] = [{"request": s.get("request"), "dropped": s.get("dropped"), "usage": s.get("usage"),
                           "reasons": s.get("reasons", [])} for s in row["samples"]]
    return row


def error_row(row: dict, reasons: list[str]) -> dict:
    row["status"] = "ERROR"
    row["reasons"] = list(reasons)
    return finish_row(row)


def _client(ttft=None, itl=None, e2e=None, tok_s=None, kind=None, **extra) -> dict:
    return {"ttft_ms": _ms(ttft), "itl_ms": _ms(itl), "e2e_s": _r(e2e), "tok_s": _r(tok_s), "tok_s_kind": kind,
            **extra}


# ---- report and files -------------------------------------------------------------------------------
def counts(rows: list[dict]) -> dict:
    out = {status: sum(1 for r in rows if r["status"] == status) for status in STATUSES}
    out["total"] = len(rows)
    return out


def overall_status(rows: list[dict]) -> str:
    """PASS unless a row is ERROR (then ERROR) or FAIL (then FAIL); NOT_IMPLEMENTED does not fail."""
    statuses = {r["status"] for r in rows}
    return "ERROR" if "ERROR" in statuses else "FAIL" if "FAIL" in statuses else "PASS"


def row_label(row: dict) -> str:
    return f"external {row['level']}" if row["lane"] == "external" else str(row["lane"])


def client_kinds(rows: list[dict]) -> dict[str, list[str]]:
    """Each client kind among the rows, with the rows (by lane) that carry it, in row order."""
    kinds: dict[str, list[str]] = {}
    for row in rows:
        kind = row.get("client_kind")
        if kind:
            labels = kinds.setdefault(kind, [])
            if row_label(row) not in labels:
                labels.append(row_label(row))
    return kinds


def mix_reasons(kinds: dict[str, list[str]]) -> list[str]:
    """The refusal of a report whose rows were measured by more than one kind of client."""
    if len(kinds) < 2:
        return []
    parts = [f"{kind} ({', '.join(labels)})" for kind, labels in sorted(kinds.items())]
    return ["rows mix client kinds: " + " and ".join(parts) + "; vllm-bench and openai_portable rows are never "
            "reported together"]


def _cell(value: object, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _notes(row: dict) -> str:
    notes = list(row["reasons"])
    server = row.get("server") or {}
    if row["lane"] == "spec_decode" and server.get("acceptance_rate") is not None:
        notes.append(f"acceptance {server['acceptance_rate']:.4f}, mean length {server['mean_acceptance_length']:.3f}")
    if row["lane"] == "latency" and row["status"] != "ERROR":
        notes.append("rep 1 dropped (warm-up)")
    if row["lane"] == "canary" and row["client"].get("answer") is not None:
        notes.append(f"answer {row['client']['answer']}")
    if row["lane"] == "external" and row["client"].get("report"):
        notes.append(f"report {row['client']['report']}")
    if server.get("error"):
        notes.append(f"server: {server['error']}")
    return "; ".join(notes)


def markdown(report: dict) -> str:
    lines = [f"# Systems lanes: {report['model']}", "",
             f"- status: **{report['status']}**",
             f"- base URL: `{report['base_url']}`",
             f"- started: {report['started']}, finished: {report['finished']}",
             "- rows: " + ", ".join(f"{k} {v}" for k, v in report["counts"].items()),
             "- client kinds: " + (", ".join(report.get("client_kinds") or []) or "none")]
    if report.get("r0b0bench_version"):
        lines.append(f"- r0b0bench: {report['r0b0bench_version']}")
    lines += [f"- refused: {_cell(reason)}" for reason in report.get("reasons") or []]
    lines += ["",
              "| lane | level | status | TTFT ms | ITL ms | e2e s | client tok/s | server tok/s | notes |",
              "|---|---|---|---:|---:|---:|---:|---:|---|"]
    for row in report["rows"]:
        c, srv = row["client"], row.get("server") or {}
        server_rate = srv.get("prompt_tok_s") if c.get("tok_s_kind") == "prefill" else srv.get("generation_tok_s")
        lines.append("| " + " | ".join([row["lane"], _cell(row["level"]), row["status"], _cell(c.get("ttft_ms")),
                                        _cell(c.get("itl_ms"), 2), _cell(c.get("e2e_s"), 3), _cell(c.get("tok_s")),
                                        _cell(server_rate), _cell(_notes(row))]) + " |")
    lines += ["", "Client figures are medians over the row's requests (latency: without the dropped warm-up; "
              "concurrency tok/s: sum of completion tokens over the level's wall time). Server tok/s: "
              "/metrics counter deltas over the row's wall time (prompt tokens for prefill, generated tokens "
              "otherwise). ERROR rows carry no figures. NOT_IMPLEMENTED rows were not measured: they carry no "
              "figure and no score, and do not fail the run."]
    return "\n".join(lines) + "\n"
