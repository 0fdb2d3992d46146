# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The site's defaults: the values a pair serves with when the inventory does not say otherwise.

A site sets ``dspark_container_name``, ``dspark_api_port``, ``dspark_master_port`` and
``dspark_served_model_name`` once in ``group_vars/all/site.yml`` (docs/operator-guide.md), and a pair
its ``dspark_profile`` in its group when it serves another profile than the default. When
one is not set, the collection falls back to :data:`SITE_DEFAULTS`. This file is the only place
those fallbacks are spelled: roles take them through the ``gb10.dspark.site`` lookup
(``lookup('gb10.dspark.site', 'api_port')``: the variable when it is defined, else the default,
see :func:`site_value`), modules and module_utils from :data:`SITE_DEFAULTS` and
:func:`local_api_url`.

Standard library only; it runs on the ranks too.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["SITE_DEFAULTS", "VARIABLES", "TERMS", "API_KEY_VARIABLE", "variable_name", "default", "local_api_url",
           "site_value", "has_api_key"]

# term (a plain name, as the lookup takes it) -> the site's default
SITE_DEFAULTS: dict[str, Any] = {
    # the engine container, the same name on both ranks of a pair
    "container_name": "dspark_vllm",
    # the head's OpenAI-compatible API port
    "api_port": 8888,
    # the head's rendezvous port for its worker
    "master_port": 25000,
    # the model name the head's API serves
    "served_model_name": "deepseek-v4-flash-dspark",
    # the serving profile a pair runs when its inventory names none (a key of the profile catalog)
    "profile": "production",
}

# term -> the inventory variable that overrides its default
VARIABLES: dict[str, str] = {term: f"dspark_{term}" for term in SITE_DEFAULTS}

TERMS: tuple[str, ...] = tuple(SITE_DEFAULTS)

# The site's API key (no default: without one the engine serves without a key).
API_KEY_VARIABLE = "dspark_api_key"


def _known(term: object) -> str:
    if not isinstance(term, str) or term not in SITE_DEFAULTS:
        raise ValueError(f"unknown site term {term!r}; the known terms are {', '.join(TERMS)}")
    return term


def variable_name(term: str) -> str:
    """The inventory variable of ``term`` (``'api_port'`` -> ``'dspark_api_port'``); ValueError if unknown."""
    return VARIABLES[_known(term)]


def default(term: str) -> Any:
    """The site's default of ``term``; ValueError (naming the known terms) if unknown."""
    return SITE_DEFAULTS[_known(term)]


def local_api_url(port: int | str | None = None) -> str:
    """The head's API as seen on the head itself: ``http://127.0.0.1:<port>`` (default: the site's API port)."""
    return f"http://127.0.0.1:{SITE_DEFAULTS['api_port'] if port is None else port}"


def site_value(term: str, variables: Mapping[str, Any] | None,
               template: Callable[[Any], Any] | None = None) -> Any:
    """The value of ``term`` for a task: its variable (``dspark_<term>``) when ``variables`` defines it,
    passed through ``template`` (the caller's templar, so that a variable holding a template counts
    as what it renders to), else the site's default. A defined variable wins whatever its value,
    exactly as ``dspark_<term> | default(<site default>)`` did. ValueError if ``term`` is unknown."""
    name = variable_name(term)
    if variables is not None and name in variables:
        value = variables[name]
        return template(value) if template is not None else value
    return SITE_DEFAULTS[term]


def has_api_key(variables: Mapping[str, Any] | None, template: Callable[[Any], Any] | None = None) -> bool:
    """Whether the site has an API key: ``dspark_api_key`` is defined and not empty (after ``template``).

    The one definition of "has a key" (roles ask ``lookup('gb10.dspark.has_api_key')``); exactly what
    ``(dspark_api_key | default('')) | length > 0`` said, with null counted as no key. Never returns the key.
    """
    if variables is None or API_KEY_VARIABLE not in variables:
        return False
    value = variables[API_KEY_VARIABLE]
    if template is not None:
        value = template(value)
    try:
        return len(value) > 0
    except TypeError:
        return False
