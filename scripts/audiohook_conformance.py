"""Genesys' AudioHook API test suite (jest) against this server's /audiohook.

The work is done by tools/audiohook_conformance.py; docs/callcentre.md says how to run it.

Example:
    python scripts/audiohook_conformance.py ~/src/audiohook-reference-implementation --install
"""

from tools.audiohook_conformance import main

if __name__ == "__main__":
    raise SystemExit(main())
