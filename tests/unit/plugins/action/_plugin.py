"""Build an action plugin instance around a mocked task and connection, as the task executor would."""
from __future__ import annotations

from unittest import mock


def make_plugin(plugin_class, action: str, args: dict, check_mode: bool = False):
    """``plugin_class`` for a task running ``action`` with ``args``; the connection is a mock."""
    task = mock.MagicMock()
    task.args = dict(args)
    task.async_val = 0
    task.check_mode = check_mode
    task.action = action
    connection = mock.MagicMock()
    connection._shell.tmpdir = "/tmp/x"
    return plugin_class(task, connection, mock.MagicMock(), mock.MagicMock(), mock.MagicMock())
