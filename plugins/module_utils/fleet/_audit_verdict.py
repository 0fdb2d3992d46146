# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet audit's judgement: one verdict per pair from its two ranks' audits against the pair's desired state
(:func:`pair_verdict`, pure), and the fleet's verdicts from every rank's result (:func:`fleet_verdicts`).

Split from :mod:`._audit`, whose :func:`collect` gathers what is judged here on each rank."""
from __future__ import annotations

from ansible_collections.gb10.dspark.plugins.module_utils.identity._identity import Mismatch
from ansible_collections.gb10.dspark.plugins.module_utils.fleet._audit import (
    AUDIT_KEYS,
    DESIRED_REQUIRED,
    LABEL_CUDAGRAPH,
    LABEL_IMAGE_ID,
    LABEL_MANIFEST_SHA256,
    LABEL_MODEL_REVISION,
    LABEL_PAIR,
    LABEL_PROFILE,
    LABEL_PROFILE_SHA256,
    LABEL_RANK,
    REASON_LOG_LINES,
    ROLES,
)


# ============================================================================================
# the pair's verdict (pure)
# ============================================================================================
def _rank_input(role: str, value: object, known: str | None = None) -> tuple[dict | None, str, str | None]:
    """(the audit or None, the rank's name, why it could not be audited). ``known`` is the rank's
    name when the caller knows it (an unreachable rank's result does not say)."""
    if value is None:
        return None, known or role, "no audit result"
    if not isinstance(value, dict):
        return None, known or role, f"the audit result is a {type(value).__name__}, not a mapping"
    inner = value.get("audit") if isinstance(value.get("audit"), dict) else None
    name = str(value.get("rank") or (inner or {}).get("rank") or known or role)
    if value.get("unreachable"):
        return None, name, str(value.get("msg") or "unreachable")
    if value.get("failed"):
        return None, name, "the audit failed: " + str(value.get("msg") or "no message")
    audit = inner if inner is not None else value
    missing = [k for k in AUDIT_KEYS if k not in audit]
    if missing:
        return None, name, "no audit result" + (f" (missing {', '.join(missing)})" if len(missing) < len(AUDIT_KEYS)
                                                else "")
    return audit, name, None


def _check_desired(desired: object) -> dict:
    if not isinstance(desired, dict):
        raise ValueError(f"desired must be a mapping, not {type(desired).__name__}")
    missing = [k for k in DESIRED_REQUIRED if desired.get(k) in (None, "")]
    if missing:
        raise ValueError("desired state lacks " + ", ".join(missing))
    return desired


def _section(audit: dict, key: str) -> dict:
    value = audit.get(key)
    return value if isinstance(value, dict) else {}


def _api_up(api: object) -> tuple[bool, str]:
    """(the head's API answers /v1/models with at least one model, what it does instead)."""
    if not isinstance(api, dict):
        return False, "not queried (api=false)"
    if api.get("status") != 200:
        detail = api.get("error") or (f"HTTP {api.get('status')}" if api.get("status") else "no answer")
        return False, f"not answering ({detail})"
    if not api.get("models"):
        return False, "answering with no model"
    return True, "answering"


def _down(role: str, name: str, audit: dict) -> list[Mismatch]:
    out = []
    docker = _section(audit, "docker")
    container = _section(audit, "container")
    cname = container.get("name") or "engine"
    if docker.get("reachable") is not True:
        out.append(Mismatch(name, "docker engine", "reachable", "unreachable", reason=str(docker.get("error") or ""),
                            expected_word="expected"))
    elif container.get("exists") is not True:
        actual = "absent" if container.get("exists") is False else "unknown"
        out.append(Mismatch(name, f"container {cname}", "running", actual, reason=str(container.get("error") or ""),
                            expected_word="expected"))
    elif container.get("running") is not True:
        actual = f"{container.get('status') or 'not running'} (exit code {container.get('exit_code')})"
        errors = [line for line in container.get("error_lines") or [] if isinstance(line, str)]
        last = [line for line in container.get("last_log_lines") or [] if isinstance(line, str)][-REASON_LOG_LINES:]
        why = ("its errors: " + " | ".join(errors)) if errors else ("last log lines: " + " | ".join(last)) if last else ""
        out.append(Mismatch(name, f"container {cname}", "running", actual, expected_word="expected", reason=why))
    if role == "head":
        up, actual = _api_up(audit.get("api"))
        if not up:
            out.append(Mismatch(name, "OpenAI API", "answering /v1/models", actual, expected_word="expected"))
    return out


def _hung(name: str, audit: dict) -> list[Mismatch]:
    """The head answers its API but does not generate: its liveness probe failed."""
    live = audit.get("liveness")
    if not isinstance(live, dict) or live.get("ok") is not False:
        return []
    return [Mismatch(name, "generation", "one token", "stalled" if live.get("stalled") else "failing",
                     reason=str(live.get("error") or "the liveness probe failed"), expected_word="expected")]


def _norm_revision(value: object) -> object:
    return value.strip().lower() if isinstance(value, str) else value


def _drift(role: str, name: str, audit: dict, desired: dict, pair: str) -> list[Mismatch]:
    out: list[Mismatch] = []
    docker = _section(audit, "docker")
    container = _section(audit, "container")
    labels = container.get("labels") if isinstance(container.get("labels"), dict) else {}

    def differ(item: str, expected: object, actual: object, reason: str = "", word: str = "pinned") -> None:
        if actual != expected:
            out.append(Mismatch(name, item, expected, actual, reason=reason, expected_word=word))

    if docker.get("reachable") is True:
        ids = [i.get("id") for i in audit.get("images") or [] if isinstance(i, dict)]
        if desired["image_id"] not in ids:
            out.append(Mismatch(name, f"image {desired['image_id']}", "present", "absent",
                                reason="not among the rank's images", expected_word="expected"))
        tag = desired.get("image_tag")
        if tag:  # the pinned tag must name the pinned ID: another image under it is a swap
            tagged = [i.get("id") for i in audit.get("images") or [] if isinstance(i, dict) and tag in (i.get("tags") or [])]
            actual = tagged[0] if len(tagged) == 1 else (tagged or "absent")
            differ(f"image {tag}", desired["image_id"], actual)
    if container.get("exists") is True:
        differ("running image", desired["image_id"], container.get("image_id"))
        differ(f"label {LABEL_IMAGE_ID}", desired["image_id"], labels.get(LABEL_IMAGE_ID))
        differ(f"label {LABEL_PAIR}", pair, labels.get(LABEL_PAIR), word="expected")
        differ(f"label {LABEL_RANK}", str(ROLES.index(role)), labels.get(LABEL_RANK), word="expected")
        differ(f"label {LABEL_PROFILE}", desired["profile"], labels.get(LABEL_PROFILE))
        differ(f"label {LABEL_PROFILE_SHA256}", desired["profile_sha256"], labels.get(LABEL_PROFILE_SHA256))
        if desired.get("cudagraph_implementation") not in (None, ""):
            differ(f"label {LABEL_CUDAGRAPH}", desired["cudagraph_implementation"], labels.get(LABEL_CUDAGRAPH))
        differ(f"label {LABEL_MANIFEST_SHA256}", desired["manifest_sha256"], labels.get(LABEL_MANIFEST_SHA256))
        differ(f"label {LABEL_MODEL_REVISION}", _norm_revision(desired["model_revision"]),
               _norm_revision(labels.get(LABEL_MODEL_REVISION)))
        profile_file = _section(audit, "profile_file")
        if profile_file.get("env_matches_container") is not True:
            if profile_file.get("env_matches_container") is False:
                actual = "changed since the container started"
                reason = "entries not in the container's environment: " + ", ".join(
                    profile_file.get("env_differences") or [])
            else:
                actual = "absent" if not profile_file.get("present") else "unreadable"
                reason = str(profile_file.get("error") or "")
            item = f"profile env file {profile_file.get('path')}" if profile_file.get("path") else "profile env file"
            out.append(Mismatch(name, item, "the container's environment", actual, reason=reason,
                                expected_word="expected to match"))
    manifest = _section(audit, "manifest")
    differ(f"runtime manifest {manifest.get('path')}", desired["manifest_sha256"], manifest.get("sha256"),
           reason=str(manifest.get("error") or ""))
    model = _section(audit, "model")
    differ(f"model revision in {model.get('dir')}", _norm_revision(desired["model_revision"]),
           _norm_revision(model.get("revision")), reason=str(model.get("error") or ""))
    if role == "head":
        api = audit.get("api")
        if _api_up(api)[0]:
            models = api.get("models") or []  # type: ignore[union-attr]
            if desired["served_model"] not in models:
                out.append(Mismatch(name, "served models", desired["served_model"], models,
                                    reason="the served model is not in /v1/models", expected_word="expected"))
    return out


def _cross_rank(head: tuple[str, dict], worker: tuple[str, dict]) -> list[Mismatch]:
    (hname, haudit), (wname, waudit) = head, worker
    hc, wc = _section(haudit, "container"), _section(waudit, "container")
    if hc.get("exists") is not True or wc.get("exists") is not True:
        return []
    out = []
    pairs = (("running image", hc.get("image_id"), wc.get("image_id")),
             (f"label {LABEL_PROFILE_SHA256}", (hc.get("labels") or {}).get(LABEL_PROFILE_SHA256),
              (wc.get("labels") or {}).get(LABEL_PROFILE_SHA256)))
    for item, hval, wval in pairs:
        if hval != wval:
            out.append(Mismatch(wname, item, hval, wval, reason="the ranks of the pair disagree",
                                expected_word=f"head {hname} has"))
    return out


def _summary(role: str, name: str, audit: dict | None, why: str | None) -> dict:
    if audit is None:
        return {"rank": name, "role": role, "reachable": False, "msg": why}
    container = _section(audit, "container")
    labels = container.get("labels") if isinstance(container.get("labels"), dict) else {}
    api = audit.get("api") if isinstance(audit.get("api"), dict) else None
    return {
        "rank": name, "role": role, "reachable": True, "msg": None,
        "docker_reachable": _section(audit, "docker").get("reachable"),
        "container_status": container.get("status"),
        "running": container.get("running"),
        "started_at": container.get("started_at"),
        "restart_count": container.get("restart_count"),
        "image_id": container.get("image_id"),
        "profile": labels.get(LABEL_PROFILE),
        "profile_sha256": labels.get(LABEL_PROFILE_SHA256),
        "manifest_sha256": _section(audit, "manifest").get("sha256"),
        "model_revision": _section(audit, "model").get("revision"),
        "api_ready": api.get("ready") if api else None,
        "num_requests_running": api.get("num_requests_running") if api else None,
    }


def _as_dict(role: str, mismatch: Mismatch) -> dict:
    data = mismatch.as_dict()
    data["role"] = role
    return data


def pair_verdict(pair: str, desired: dict, head: object, worker: object,
                 names: tuple[str | None, str | None] = (None, None)) -> dict:
    """One verdict for a pair: UNREACHABLE, DOWN, HUNG, DRIFT or OK (first that applies).

    ``head`` and ``worker`` are the ranks' ``audit`` results (a registered module result holding
    ``audit`` is accepted too), or None / ``{"unreachable": True, "msg": ...}`` for a rank that
    could not be audited; ``names`` are the head's and the worker's inventory names, used where a
    result does not say (an unreachable rank). ``desired`` holds image_id, manifest_sha256, model_revision, profile,
    profile_sha256, served_model and optionally cudagraph_implementation and image_tag (the pinned
    tag, which must name image_id on both ranks) (ValueError when one of
    the required keys is missing).

    ``differences`` lists every difference found, as far as the ranks could be read (also for a
    DOWN pair, where only they do not decide the verdict); ``reasons`` says, one message per line,
    why the verdict is what it is; a DOWN or HUNG pair also has ``logs``, each rank's last log lines.
    """
    desired = _check_desired(desired)
    ranks = {role: _rank_input(role, value, known) for role, value, known in zip(ROLES, (head, worker), names)}
    summaries = {role: _summary(role, name, audit, why) for role, (audit, name, why) in ranks.items()}
    result = {"pair": pair, "verdict": "OK", "differences": [], "reasons": [], "ranks": summaries}

    unreachable = [Mismatch(name, "host", "reachable", "unreachable", reason=why or "", expected_word="expected")
                   for role, (audit, name, why) in ranks.items() if audit is None]
    if unreachable:
        result.update(verdict="UNREACHABLE", reasons=[m.message for m in unreachable])
        return result

    down: list[Mismatch] = []
    differences: list[tuple[str, Mismatch]] = []
    for role, (audit, name, _unused) in ranks.items():
        down += _down(role, name, audit)  # type: ignore[arg-type]
        differences += [(role, m) for m in _drift(role, name, audit, desired, pair)]  # type: ignore[arg-type]
    (head_audit, head_name, _unused), (worker_audit, worker_name, _unused) = ranks["head"], ranks["worker"]
    differences += [("worker", m) for m in _cross_rank((head_name, head_audit), (worker_name, worker_audit))]  # type: ignore[arg-type]
    result["differences"] = [_as_dict(role, m) for role, m in differences]
    hung = _hung(ranks["head"][1], ranks["head"][0]) if not down else []  # type: ignore[arg-type]
    if down:
        result.update(verdict="DOWN", reasons=[m.message for m in down], logs=_pair_logs(ranks))
    elif hung:
        result.update(verdict="HUNG", reasons=[m.message for m in hung], logs=_pair_logs(ranks))
    elif differences:
        result.update(verdict="DRIFT")  # every difference is in ``differences``, with rank, expected, actual
    return result


def _pair_logs(ranks: dict) -> dict:
    """Both ranks' last log lines, for a pair that is DOWN or HUNG: what to read first (an empty list
    when a rank's engine or container could not be read)."""
    out = {}
    for role, (audit, _name, _why) in ranks.items():
        lines = _section(audit or {}, "container").get("last_log_lines") or []
        out[role] = [line for line in lines if isinstance(line, str)]
    return out


def fleet_verdicts(pairs: dict, ranks: dict) -> list[dict]:
    """The verdict documents of the play's pairs, for the fleet report: one per pair of ``pairs`` whose head is
    in the play. ``pairs`` is the play's one mapping of pairs, ``{pair: {"head", "worker"}}`` (the topology's
    ``dspark_play_pairs``, worked out by ``_pair.play_pairs``; an absent rank is None); ``ranks`` maps a host to
    ``{"verdict" (the head's judged document, or None), "failure" (why the rank could not be judged, or None)}``.
    A pair with a rank that could not be judged is FAILED with every such rank's reason (the head's first),
    whatever its head judged; a head with neither a verdict nor a failure gives nothing (the report names the
    pair as missing)."""
    out = []
    for pair, members in pairs.items():
        head, worker = members.get("head"), members.get("worker")
        if not head:
            continue
        reasons = [str(why) for host in (head, worker) if host and (why := (ranks.get(host) or {}).get("failure"))]
        verdict = (ranks.get(head) or {}).get("verdict")
        if reasons:
            out.append({"pair": str(pair), "verdict": "FAILED", "reasons": reasons})
        elif verdict is not None:
            out.append(verdict)
    return out


def expected_pairs(pairs: dict) -> list[str]:
    """The pairs of ``pairs`` (as :func:`fleet_verdicts` takes them) whose head is in the play: the ones the fleet
    report must name, missing if no verdict came back."""
    return [str(pair) for pair, members in pairs.items() if members.get("head")]
