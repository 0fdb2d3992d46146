# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's one timestamp (``_clock.utc_now``), used by every module that stamps a time."""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from ansible_collections.gb10.dspark.plugins.module_utils.common import _clock
from ansible_collections.gb10.dspark.plugins.module_utils.evidence import _evidence_pack
from ansible_collections.gb10.dspark.plugins.module_utils.fleet import _fleet_report, _pair_lock
from ansible_collections.gb10.dspark.plugins.module_utils.serving import _systems

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def test_now_is_utc_to_the_second_ending_in_z():
    before = datetime.now(timezone.utc).replace(microsecond=0)
    stamp = _clock.utc_now()
    after = datetime.now(timezone.utc)
    assert STAMP.match(stamp) and _fleet_report.GENERATED.match(stamp)
    assert before <= datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc) <= after


def test_a_given_moment_is_converted_to_utc_and_truncated():
    plus_two = timezone(timedelta(hours=2))
    assert _clock.utc_now(datetime(2026, 8, 5, 14, 0, 1, 999_999, tzinfo=plus_two)) == "2026-08-05T12:00:01Z"
    assert _clock.utc_now(datetime(2026, 8, 5, 12, 0, 0, tzinfo=timezone.utc)) == "2026-08-05T12:00:00Z"


def test_a_naive_moment_is_taken_as_utc():
    assert _clock.utc_now(datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05Z"


def test_the_format_is_the_one_the_three_former_copies_wrote():
    moment = datetime(2026, 8, 5, 12, 0, 0, 123456, tzinfo=timezone.utc)
    lock_style = moment.replace(microsecond=0).isoformat().replace("+00:00", "Z")  # the lock's former copy
    report_style = moment.strftime("%Y-%m-%dT%H:%M:%SZ")  # the systems and fleet reports' former copies
    assert _clock.utc_now(moment) == lock_style == report_style


def test_every_stamping_module_uses_the_one_clock():
    assert _pair_lock.utc_now is _clock.utc_now
    assert _systems.utc_now is _clock.utc_now
    assert _fleet_report.utc_now is _clock.utc_now
    assert _evidence_pack.utc_now is _clock.utc_now
