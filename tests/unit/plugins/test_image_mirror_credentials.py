"""A site mirror's URL with a user and password (``https://user:pass@host/...``): the image role's
tasks show and pass only the URL without them, and hand them to the fetching modules as
``url_username`` / ``url_password`` (which Ansible masks). Every string a task of the role displays
or passes - module arguments, ``fail_msg``, ``msg`` - that mentions the mirror is rendered with
Ansible's own templar, and neither the user nor the password (in any spelling) may appear in it."""
from __future__ import annotations

import urllib.parse

import pytest
import yaml

from ansible_collections.gb10.dspark.plugins.filter.url_credentials import FilterModule
from tests.unit.plugins._templar import render
from tests.unit.plugins.conftest import REPO

ROLE = REPO / "roles" / "image"
USER, PASSWORD = "mirror-alice", "s3cr/t@pw"
URL = f"https://{USER}:{urllib.parse.quote(PASSWORD, safe='')}@mirror.site.example:8443/img/dspark-v026.tar"
CLEAN = "https://mirror.site.example:8443/img/dspark-v026.tar"
CREDENTIAL_KEYS = ("url_username", "url_password")
SPELLINGS = (USER, PASSWORD, urllib.parse.quote(PASSWORD, safe=""), urllib.parse.quote(PASSWORD), "s3cr")


def tasks(items: list) -> list[dict]:
    out = []
    for item in items or []:
        out.append(item)
        for key in ("block", "rescue", "always"):
            out += tasks(item.get(key))
    return out


def strings(value, path=()):
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings(item, (*path, str(key)))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from strings(item, (*path, str(i)))


def module_of(task: dict) -> str:
    return next(k for k in task if "." in k and k.count(".") >= 2)


def variables() -> dict:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    return {**defaults, **role_vars, "dspark_image_archive": "/srv/release/dspark-v026.tar",
            "dspark_image_mirror_url": URL, "inventory_hostname": "spark-a", "omit": "__omit_place_holder__",
            "dspark_pin": {"image_archive_sha256": "ab" * 32},
            "__dspark_image_mirror_fetch": {"failed": True, "msg": "HTTP Error 404: Not Found"}}


def mirror_strings() -> list[tuple[str, str]]:
    """(task name and key, template) of every string a task shows or passes that mentions the mirror."""
    out = []
    for path in sorted((ROLE / "tasks").glob("*.yml")):
        for task in tasks(yaml.safe_load(path.read_text())):
            if "block" in task:
                continue
            args = task[module_of(task)]
            for keys, text in strings(args):
                if keys[:1] and keys[0] in CREDENTIAL_KEYS:
                    continue
                if "mirror" in text:
                    out.append((f"{path.name}: {task['name']}: {'.'.join(keys)}", text))
    return out


def test_the_filter_splits_the_url_from_its_credentials():
    split = FilterModule().filters()["url_credentials"]
    assert split(URL) == {"url": CLEAN, "username": USER, "password": PASSWORD}
    assert split(CLEAN) == {"url": CLEAN, "username": "", "password": ""}


def test_no_task_shows_or_passes_the_mirror_credentials():
    found = mirror_strings()
    names = " ".join(name for name, _ in found)
    # the HEAD of the mirror, its fetch and the judgement of the fetch are all covered
    assert "Size of the archive on the site mirror" in names and "Fetch the archive from the site mirror" in names
    assert "received the pinned archive from the site mirror: fail_msg" in names
    rendered = render([(variables(), text) for _, text in found], catch=True)
    for (name, _), got in zip(found, rendered):
        assert "value" in got, (name, got)
        text = str(got["value"])
        for spelling in SPELLINGS:
            assert spelling not in text, (name, text)
    assert any(CLEAN in str(got["value"]) for got in rendered)


@pytest.mark.parametrize("task_name", ["Image | Size of the archive on the site mirror, as the head sees it",
                                       "Image | Fetch the archive from the site mirror, checked against the pin's sha256"])
def test_the_mirror_credentials_go_apart_as_url_username_and_url_password(task_name):
    task = next(t for t in tasks(yaml.safe_load((ROLE / "tasks" / "load.yml").read_text())) if t["name"] == task_name)
    args = task[module_of(task)]
    url, user, password = render([(variables(), args[k]) for k in ("url", *CREDENTIAL_KEYS)])
    assert (url, user, password) == (CLEAN, USER, PASSWORD)
    without = render([({**variables(), "dspark_image_mirror_url": CLEAN}, args[k]) for k in CREDENTIAL_KEYS])
    assert without == ["__omit_place_holder__"] * 2  # no credentials: none passed
