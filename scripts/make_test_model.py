"""Build a SenseVoiceSmall model dir with random weights, for tests and offline development.

    python scripts/make_test_model.py --size tiny|full --out DIR [--seed N]

A thin command line over `engine.model.random_weights` (also `python -m
engine.model.random_weights`).
"""

from __future__ import annotations

import sys

from engine.model.random_weights import main

if __name__ == "__main__":
    sys.exit(main())
