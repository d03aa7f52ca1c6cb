"""Train the demo model (models/demo/) on synthetic speech; the work is tools/demo_model.

Every step resumes from what its work dir (default ~/.cache/sensestream/demo-train)
holds, so the same command continues an interrupted run:
    python scripts/train_demo_model.py all --utterances 10000 --steps 3000
"""

from tools.demo_model.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
