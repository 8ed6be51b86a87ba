"""The MNS transport's tests share the ROS dialect's local MNS server and daemon fixtures."""
from tests.dialects.conftest import json_log, mns, mns_env, ros_daemon  # noqa: F401 - fixtures
