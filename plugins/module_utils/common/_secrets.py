# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Secrets: which variable names hold them, and the collection's one way to redact them.

:func:`is_secret_name` is the one rule of the collection for NAMES (the evidence pack redacts by
it, the fleet audit neither returns nor hashes what it matches). A NAME is judged by its words
(split at ``_``, ``-``, ``.`` and camelCase), so counters and structural names that merely contain
a word - MTP_NUM_TOKENS, DSPARK_SIM_TOKEN_DELAY_S, run_key, pass_count, KV_CACHE_DTYPE - are not
secret, while DB_PASSWD, AWS_CREDENTIALS, HF_TOKEN, apiKey and VLLM_API_KEY are.

Redaction, in two rules:

* KNOWN VALUES: :func:`redact` replaces every occurrence of each known secret, in every spelling a
  message may carry it (:func:`spellings`: raw, JSON-, repr- and URL-escaped) (an API key, the
  values of the secret-named entries of an environment, :func:`secret_env_values`) by a fixed
  placeholder, in strings and mapping keys at any depth. The runtime gate, the fleet audit and the
  systems lanes scrub what they return with it. :func:`replace_each` is the same walk with a
  placeholder per needle (the evidence pack's control-node paths).
* VARIABLES: :func:`redact_secrets_text` and :func:`redact_document` replace the value of every
  variable whose NAME looks secret, or whose whole value is a told secret (the evidence pack, the
  runtime gate's command tokens); :func:`variable_leaks` finds such a value left unredacted.

One placeholder, :data:`REDACTED`, and one minimum length of a value searched for in text,
:data:`MIN_SECRET_LENGTH`. Nothing else in the collection or its command line (``dspark``) spells
a secret-name rule, a redactor or a minimum of its own (tests/unit/docs/test_architecture.py).

:func:`api_key_problem` says why a key cannot go into a header (a newline, a space, a control
character), naming the variable and never the value.

Standard library only; it runs on the ranks as well as on the control node.
"""
from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterable

REDACTED = "<redacted>"

# The one minimum length of a secret VALUE that is searched for inside text: scrubbed from what a
# module returns (:func:`secret_env_values`: the values of secret-named env entries), looked for as a
# leak (the evidence pack's told secrets) or derived from a told secret (:func:`spellings`: the key
# without its surrounding whitespace). A shorter value cannot be told apart from ordinary text: "1",
# "true", "auto" or "8888" would blank each of their occurrences in a verdict, and a leak scan would
# find them in every file. 6, not the audit's former 8: a longer minimum would let a 6- or
# 7-character secret ("hunter", "sk-live") through, and the evidence pack has always searched from
# 6. The variable that holds a shorter value is still redacted by its NAME (:func:`redact_document`,
# :func:`redact_secrets_text`). The one value a caller hands :func:`redact` itself, the API key, is
# scrubbed whatever its length: a mangled message is better than a key in it (the evidence pack does
# not search its files for a shorter key, which its leak scan would find everywhere, and warns).
MIN_SECRET_LENGTH = 6

SECRET_IN_NAME = ("SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "APIKEY", "ACCESSKEY", "PRIVATEKEY",
                  "COOKIE", "BEARER", "SESSIONID")  # anywhere, words glued together
SECRET_WORDS = frozenset(("AUTH", "AUTHORIZATION", "OAUTH", "CRED", "CREDS", "PRIVATE", "SIGNATURE", "CERT", "CERTS",
                          "CERTIFICATE", "JWT", "SALT", "DSN"))  # any word
SECRET_LAST_WORDS = frozenset(("TOKEN", "PASS", "PWD", "SESSION"))  # the last word (or a last word ending in TOKEN)
KEY_WORDS = frozenset(("KEY", "KEYS"))  # the last word after a qualifier: API_KEY, not key or run_key
NOT_SECRET_KEY_QUALIFIERS = frozenset(("RUN", "SORT", "CACHE", "PARTITION", "PRIMARY", "FOREIGN", "ROUTING", "SHARD",
                                       "LOOKUP", "GROUP", "INDEX", "MAP", "DICT"))
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")
_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]+")


def is_secret_name(name: object) -> bool:
    """Whether a variable called ``name`` holds (or may hold) a secret, whatever its case."""
    if not isinstance(name, str):
        return False
    words = [w.upper() for w in _NOT_ALNUM.split(_CAMEL.sub("_", name)) if w]
    if not words:
        return False
    if any(part in "".join(words) for part in SECRET_IN_NAME) or any(w in SECRET_WORDS for w in words):
        return True
    last = words[-1]
    if last in KEY_WORDS:
        return len(words) > 1 and words[-2] not in NOT_SECRET_KEY_QUALIFIERS
    return last in SECRET_LAST_WORDS or last.endswith("TOKEN")


def secret_env_values(env: Iterable[object]) -> list[str]:
    """The values of the ``NAME=value`` entries of ``env`` whose NAME looks secret
    (:func:`is_secret_name`) and which are at least :data:`MIN_SECRET_LENGTH` characters long, in
    order; anything else in ``env`` is skipped."""
    out = []
    for entry in env:
        if isinstance(entry, str) and "=" in entry:
            name, _sep, value = entry.partition("=")
            if is_secret_name(name) and len(value) >= MIN_SECRET_LENGTH:
                out.append(value)
    return out


# --------------------------------------------------------------------------------------------
# an API key fit for a header
# --------------------------------------------------------------------------------------------
_CHARACTER_NAMES = {"\n": "a line feed (\\n)", "\r": "a carriage return (\\r)", "\t": "a tab (\\t)",
                    " ": "a space", "\x00": "a NUL byte"}


def api_key_problem(value: object, variable: str = "dspark_api_key") -> str | None:
    """Why ``value`` cannot be sent as ``Authorization: Bearer <value>``, naming ``variable`` and never the
    value, or None when it can (or when there is no key). A key is one word of printable ASCII: a key with a
    line ending (``echo KEY | ansible-vault encrypt_string`` keeps echo's newline), a space or a control
    character would make Python's HTTP client fail with the value in its error text."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        return f"{variable} is a {type(value).__name__}, expected a text (its value is not shown); nothing was changed"
    bad = [(i, c) for i, c in enumerate(value) if not "!" <= c <= "~"]
    if not bad:
        return None
    index, char = bad[0]
    if char in _CHARACTER_NAMES:
        what = _CHARACTER_NAMES[char]
    elif ord(char) < 32 or ord(char) == 127:
        what = f"a control character (U+{ord(char):04X})"
    else:
        what = "a character outside printable ASCII"
    where = ("at its start" if index == 0 else
             "at its end" if len(value) - index == len(bad) else "inside it")  # only bad characters after it
    more = f" (and {len(bad) - 1} more such character(s))" if len(bad) > 1 else ""
    return (f"{variable} holds {what} {where}{more}, expected one word of printable ASCII (it is sent as "
            f"'Authorization: Bearer <key>'); its value is not shown. A key encrypted with `echo KEY | "
            f"ansible-vault encrypt_string` keeps echo's newline: encrypt it with `printf %s KEY | ansible-vault "
            f"encrypt_string --stdin-name {variable}` instead. Nothing was changed")


def secret_entries(env: object) -> dict:
    """The entries of a ``{NAME: value}`` mapping whose NAME looks secret (:func:`is_secret_name`), values as
    text: what a role hands to a container or writes to a root-only file, and never into a result or a fact."""
    if not isinstance(env, dict):
        return {}
    return {name: value if isinstance(value, str) else str(value)
            for name, value in env.items() if is_secret_name(name) and value is not None}


# --------------------------------------------------------------------------------------------
# known values
# --------------------------------------------------------------------------------------------
def spellings(secret: str) -> list[str]:
    """Every spelling of ``secret`` a message or a file may carry, longest first: as it is, JSON-escaped
    (ASCII and not), Python-repr-escaped (of the text and of its UTF-8 bytes, as ``Invalid header value
    b'Bearer KEY\\n'`` shows it), with escaped slashes, and URL-encoded (path and form styles); and the same
    for the key without its surrounding whitespace (what a header or a log line shows of ``KEY\\n``)."""
    if not secret:
        return []
    bases = [secret]
    stripped = secret.strip()
    if stripped != secret and len(stripped) >= MIN_SECRET_LENGTH:
        bases.append(stripped)
    forms: list[str] = []
    for base in bases:
        forms += [base, json.dumps(base)[1:-1], json.dumps(base, ensure_ascii=False)[1:-1], repr(base)[1:-1],
                  repr(base.encode("utf-8"))[2:-1], base.replace("/", "\\/"), urllib.parse.quote(base, safe=""),
                  urllib.parse.quote_plus(base, safe=""), urllib.parse.quote(base)]
    unique = [form for form in dict.fromkeys(forms) if form]
    return sorted(unique, key=len, reverse=True)


def replace_each(value: object, replacements: Iterable[tuple[str, str]]) -> object:
    """``value`` with every occurrence of each needle replaced by its placeholder (in the order
    given), in strings and in mapping keys at any depth; tuples come back as lists. Without a
    (non-empty) needle ``value`` itself is returned."""
    pairs = [(needle, placeholder) for needle, placeholder in replacements if needle]
    if not pairs:
        return value

    def clean(item: object) -> object:
        if isinstance(item, str):
            for needle, placeholder in pairs:
                item = item.replace(needle, placeholder)
            return item
        if isinstance(item, dict):
            return {clean(k): clean(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return [clean(v) for v in item]
        return item

    return clean(value)


def redact(value: object, secrets: Iterable[str | None], placeholder: str = REDACTED) -> object:
    """``value`` with every occurrence of each non-empty secret, in each of its :func:`spellings`, replaced
    by ``placeholder``, in strings and in mapping keys at any depth (see :func:`replace_each`)."""
    return replace_each(value, ((form, placeholder) for secret in secrets if secret for form in spellings(secret)))


# --------------------------------------------------------------------------------------------
# variables
# --------------------------------------------------------------------------------------------
# A *variable* is a ``NAME=value`` line of an env file, an entry of a container's ``Env``, a
# ``NAME=value`` anywhere in text or in a JSON string, a JSON member, a command-line flag with its
# value (``--api-key K``, ``--hf-token=K``) or a profile departure of an ``env.NAME``. Its value is
# secret when its NAME looks secret (:func:`is_secret_name`), or when the value is one the caller
# was told is secret.
_LINE_ASSIGNMENT = re.compile(r"(\s*(?:export\s+)?)([A-Za-z_][A-Za-z0-9_]*)=(.*)")
_ASSIGNMENT = re.compile(r"(?<![A-Za-z0-9_./-])([A-Za-z_][A-Za-z0-9_]*)=([^\s\"'`]+)")
_FLAG = re.compile(r"(?<![A-Za-z0-9_-])(--?[A-Za-z][A-Za-z0-9_-]*)(=|[ \t]+)([^\s\"'`=-][^\s\"'`]*)")


def _told(value: str, secrets: list[str]) -> bool:
    return value in secrets or (len(value) > 1 and value[0] == value[-1] and value[0] in "'\"" and value[1:-1] in secrets)


def _secret_variable(name: str, value: str, secrets: list[str]) -> bool:
    return bool(value) and (is_secret_name(name) or _told(value, secrets))


def _line_spans(line: str, secrets: list[str]) -> list[tuple[str, int, int]]:
    """(name, start, end) of every secret value in one line of text, by the one rule."""
    whole = _LINE_ASSIGNMENT.fullmatch(line)
    if whole and _secret_variable(whole.group(2), whole.group(3), secrets):
        return [(whole.group(2), whole.start(3), whole.end(3))]
    start = whole.start(3) if whole else 0
    spans = [(m.group(1), m.start(2), m.end(2)) for m in _ASSIGNMENT.finditer(line, start)
             if _secret_variable(m.group(1), m.group(2), secrets)]
    spans += [(m.group(1), m.start(3), m.end(3)) for m in _FLAG.finditer(line, start)
              if _secret_variable(m.group(1), m.group(3), secrets)]
    kept: list[tuple[str, int, int]] = []
    for span in sorted(spans, key=lambda s: s[1]):
        if not kept or span[1] >= kept[-1][2]:
            kept.append(span)
    return kept


def _lines(text: str) -> list[tuple[str, str]]:
    """Each line of ``text`` split from its line ending."""
    out = []
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        out.append((body, line[len(body):]))
    return out


def redact_secrets_text(text: str, secrets: list[str] | None = None) -> str:
    """``text`` with the value of every secret variable replaced by ``<redacted>``."""
    secrets = secrets or []
    out = []
    for body, ending in _lines(text):
        for _unused, start, end in reversed(_line_spans(body, secrets)):
            body = body[:start] + REDACTED + body[end:]
        out.append(body + ending)
    return "".join(out)


def _secret_flag(element: object) -> bool:
    return isinstance(element, str) and element.startswith("-") and "=" not in element and is_secret_name(element)


def _flag_value(element: object) -> bool:
    return isinstance(element, str) and bool(element) and not element.startswith("--")


def _departure_name(value: dict) -> str | None:
    """The variable a profile departure (``{key: env.NAME, qualified, actual}``) is about, if any."""
    key = value.get("key")
    if isinstance(key, str) and ("actual" in value or "qualified" in value):
        return key.rpartition(".")[2]
    return None


def _hide(value: object) -> object:
    """Every value under a secret variable: strings (but the empty one) and numbers, at any depth."""
    if isinstance(value, str):
        return REDACTED if value else value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return REDACTED
    if isinstance(value, dict):
        return {k: _hide(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_hide(v) for v in value]
    return value


def redact_document(value: object, secrets: list[str] | None = None) -> object:
    """A JSON document with every secret value replaced by ``<redacted>``, at any depth: members with
    a secret-looking name, strings that are (or hold) a secret variable or equal a told secret, the
    value after a secret flag in a list (``["--api-key", K]``), and both values of a departure of a
    secret-looking variable."""
    secrets = secrets or []
    if isinstance(value, str):
        return REDACTED if _told(value, secrets) else redact_secrets_text(value, secrets)
    if isinstance(value, (list, tuple)):
        out = [redact_document(v, secrets) for v in value]
        for i in range(len(out) - 1):
            if _secret_flag(out[i]) and _flag_value(out[i + 1]):
                out[i + 1] = REDACTED
        return out
    if isinstance(value, dict):
        departure = _departure_name(value)
        hidden = ("actual", "qualified") if departure and is_secret_name(departure) else ()
        return {k: _hide(v) if k in hidden or is_secret_name(k) else redact_document(v, secrets)
                for k, v in value.items()}
    return value


# --------------------------------------------------------------------------------------------
# leaks: a secret variable left unredacted, by the same rule
# --------------------------------------------------------------------------------------------
def json_container(text: str) -> dict | list | None:
    """The JSON object or array ``text`` holds, else None (prose, or a JSON scalar): how a text is told
    from a JSON document."""
    try:
        document = json.loads(text)
    except ValueError:
        return None
    return document if isinstance(document, (dict, list)) else None


def _text_variable_leaks(text: str, secrets: list[str]) -> list[str]:
    """Names of the secret variables of ``text`` whose value is not ``<redacted>``. A line that is a
    JSON document (JSON lines) is judged as one."""
    names = []
    for body, _unused in _lines(text):
        document = json_container(body) if body.lstrip()[:1] in ("{", "[") else None
        if document is not None:
            names += _document_variable_leaks(document, secrets)
        else:
            names += [name for name, start, end in _line_spans(body, secrets) if body[start:end] != REDACTED]
    return names


def _document_variable_leaks(value: object, secrets: list[str], under: str | None = None) -> list[str]:
    """Names of the secret variables of a JSON document (``under``: the secret variable ``value`` is
    part of) whose value is not ``<redacted>``; the same rule as :func:`redact_document`."""
    if isinstance(value, str):
        if under is not None:
            return [under] if value and value != REDACTED else []
        return _text_variable_leaks(value, secrets)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [under] if under is not None else []
    names: list[str] = []
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            names += _document_variable_leaks(item, secrets, under)
            if (under is None and i + 1 < len(value) and _secret_flag(item) and _flag_value(value[i + 1])
                    and value[i + 1] != REDACTED):
                names.append(item)
    elif isinstance(value, dict):
        departure = _departure_name(value)
        hidden = ("actual", "qualified") if departure and is_secret_name(departure) else ()
        for key, item in value.items():
            if under is None and key in hidden:
                names += _document_variable_leaks(item, secrets, str(value.get("key")))
            elif under is None and is_secret_name(key):
                names += _document_variable_leaks(item, secrets, key)
            else:
                names += _document_variable_leaks(item, secrets, under)
    return names


def variable_leaks(data: bytes, secrets: list[str] | None = None) -> list[str]:
    """Names of the secret variables (by the variable rule) left with a value other than
    ``<redacted>`` in one file's ``data`` (a JSON document, else text), each once, in order of
    appearance."""
    secrets = secrets or []
    text = data.decode("utf-8", errors="replace")
    document = json_container(text)
    names = _document_variable_leaks(document, secrets) if document is not None else _text_variable_leaks(text, secrets)
    return list(dict.fromkeys(names))
