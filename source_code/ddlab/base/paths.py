"""Where the course's files are: the repository, its source folder and the recorded results."""
from __future__ import annotations

import os

# ddlab/base/paths.py -> ddlab -> source_code -> the repository
SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPO_ROOT = os.path.dirname(SOURCE_DIR)
REFERENCE_DIR = os.path.join(SOURCE_DIR, "reference")
