"""Names of the embedded engine's environment variables, and its defaults.

One place, because several modules read them and the README documents them.
"""

from __future__ import annotations

ENV_BIN_DIR = "PGJOBS_EMBEDDED_BIN_DIR"
ENV_DATA_DIR = "PGJOBS_EMBEDDED_DATA_DIR"
ENV_RUN_AS = "PGJOBS_EMBEDDED_RUN_AS"
ENV_SHARED_DIR = "PGJOBS_EMBEDDED_SHARED_DIR"
ENV_TEST_DATA_DIR = "PGJOBS_EMBEDDED_TEST_DATA_DIR"
ENV_TEST_OWNER = "PGJOBS_EMBEDDED_TEST_OWNER"

DEFAULT_PORT = 5432
DEFAULT_RUN_AS = "nobody"
DEFAULT_START_TIMEOUT = 60.0
LOG_NAME = "embedded.log"
