"""Fixtures for tests/realworld: the integration suite's (probing binary, environment, traced
processes) imported from tests/integration/conftest.py rather than copied."""
import importlib.util
import sys
from pathlib import Path

_path = Path(__file__).resolve().parents[1] / "integration" / "conftest.py"
_spec = importlib.util.spec_from_file_location("probing_integration_conftest", _path)
_ic = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _ic
_spec.loader.exec_module(_ic)

from probing_integration_conftest import (  # noqa: E402,F401  (fixtures, found by name)
    cli, env, launcher, probing_bin, session_dir, session_launcher, socket_dir)
